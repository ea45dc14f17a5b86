import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Conv2d, learnable per-channel scale, min over channels (dim=1, keepdim), tanh."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.scale = nn.Parameter(1.0 + 0.1 * torch.randn(out_channels, 1, 1))

    def forward(self, x):
        x = self.conv(x)
        x = x * self.scale
        x = torch.min(x, dim=1, keepdim=True).values
        return torch.tanh(x)


batch_size = 64
in_channels = 16
out_channels = 64
height = 128
width = 128
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
