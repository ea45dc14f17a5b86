import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """3D decoder upsampling: ConvTranspose3d kernel 2 stride 2, GroupNorm, tanh-approximate GELU."""

    def __init__(self, in_channels, out_channels, num_groups):
        super().__init__()
        self.up = nn.ConvTranspose3d(in_channels, out_channels, kernel_size=2, stride=2)
        self.gn = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        x = self.gn(self.up(x))
        out = F.gelu(x, approximate="tanh")
        return out


batch_size = 4
in_channels = 96
out_channels = 48
num_groups = 8
depth = 16
height = 32
width = 32


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, num_groups]
