import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """2x upsampling ConvTranspose2d, BatchNorm2d (training mode), HardSwish, scalar scale."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, scale):
        super().__init__()
        self.conv_t = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.bn = nn.BatchNorm2d(out_channels)
        self.scale = scale

    def forward(self, x):
        x = self.conv_t(x)
        x = self.bn(x)
        x = F.hardswish(x)
        return x * self.scale


batch_size = 64
in_channels = 64
out_channels = 32
height = 64
width = 64
kernel_size = 4
stride = 2
padding = 1
scale = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, scale]
