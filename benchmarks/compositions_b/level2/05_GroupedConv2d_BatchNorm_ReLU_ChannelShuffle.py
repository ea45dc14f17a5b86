import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """ShuffleNet unit piece: grouped 1x1 Conv2d, BatchNorm2d (training), in-place ReLU, channel shuffle via view/transpose."""

    def __init__(self, in_channels, out_channels, groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)
        self.groups = groups

    def forward(self, x):
        x = self.bn(self.conv(x))
        x = x.relu_()
        b, c, h, w = x.shape
        x = x.view(b, self.groups, c // self.groups, h, w).transpose(1, 2)
        out = x.reshape(b, c, h, w)
        return out


batch_size = 64
in_channels = 240
out_channels = 240
groups = 3
height = 28
width = 28


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, groups]
