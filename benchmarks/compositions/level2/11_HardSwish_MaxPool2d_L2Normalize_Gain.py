import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """HardSwish, MaxPool2d(2), L2 normalisation over channels (F.normalize, dim=1), learnable per-channel gain."""

    def __init__(self, channels, pool_size):
        super().__init__()
        self.pool = nn.MaxPool2d(pool_size)
        self.gain = nn.Parameter(1.0 + 0.1 * torch.randn(1, channels, 1, 1))

    def forward(self, x):
        x = F.hardswish(x)
        x = self.pool(x)
        x = F.normalize(x, p=2.0, dim=1, eps=1e-12)
        return x * self.gain


batch_size = 128
channels = 64
height = 64
width = 64
pool_size = 2


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, pool_size]
