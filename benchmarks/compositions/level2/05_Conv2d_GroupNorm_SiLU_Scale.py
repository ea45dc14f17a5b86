import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Conv2d, GroupNorm, SiLU, learnable per-channel scale."""

    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.norm = nn.GroupNorm(num_groups, out_channels)
        self.scale = nn.Parameter(1.0 + 0.1 * torch.randn(out_channels, 1, 1))

    def forward(self, x):
        x = self.conv(x)
        x = self.norm(x)
        x = F.silu(x)
        return x * self.scale


batch_size = 64
in_channels = 32
out_channels = 64
height = 128
width = 128
kernel_size = 3
num_groups = 8


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]
