import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """V-Net down-transition: Conv3d kernel 2 stride 2, BatchNorm3d (training), per-channel PReLU written with torch.where."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size=2, stride=2)
        self.bn = nn.BatchNorm3d(out_channels)
        self.alpha = nn.Parameter(torch.full((out_channels, 1, 1, 1), 0.25))

    def forward(self, x):
        x = self.bn(self.conv(x))
        out = torch.where(x > 0, x, self.alpha * x)
        return out


batch_size = 2
in_channels = 32
out_channels = 64
depth = 48
height = 96
width = 96


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
