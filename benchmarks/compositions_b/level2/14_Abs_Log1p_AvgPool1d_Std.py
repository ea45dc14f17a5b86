import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Log-compressed magnitude, temporal AvgPool1d smoothing, per-channel standard deviation over time."""

    def __init__(self, kernel_size, stride):
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size, stride=stride)

    def forward(self, x):
        x = torch.log1p(x.abs())
        x = self.pool(x)
        out = torch.std(x, dim=-1)
        return out


batch_size = 32
channels = 128
length = 6000
kernel_size = 4
stride = 2


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [kernel_size, stride]
