import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Conv3d, InstanceNorm3d, LeakyReLU, clamp."""

    def __init__(self, in_channels, out_channels, kernel_size, negative_slope, clamp_max):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.norm = nn.InstanceNorm3d(out_channels)
        self.negative_slope = negative_slope
        self.clamp_max = clamp_max

    def forward(self, x):
        x = self.conv(x)
        x = self.norm(x)
        x = F.leaky_relu(x, negative_slope=self.negative_slope)
        return torch.clamp(x, min=-self.clamp_max, max=self.clamp_max)


batch_size = 16
in_channels = 16
out_channels = 32
depth = 16
height = 64
width = 64
kernel_size = 3
negative_slope = 0.2
clamp_max = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, negative_slope, clamp_max]
