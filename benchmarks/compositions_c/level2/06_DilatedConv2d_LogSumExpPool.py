import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Dilated Conv2d then log-sum-exp spatial pooling: logsumexp(r * x over H, W) / r, a smooth max over positions."""

    def __init__(self, in_channels, out_channels, kernel_size, dilation, r):
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels, out_channels, kernel_size, padding=dilation * (kernel_size - 1) // 2, dilation=dilation
        )
        self.r = r

    def forward(self, x):
        x = self.conv(x) * self.r
        x = torch.logsumexp(x, dim=(2, 3))
        out = x / self.r
        return out


batch_size = 16
in_channels = 64
out_channels = 128
height = 128
width = 128
kernel_size = 3
dilation = 6
r = 5.0


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, dilation, r]
