import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Global max-pooled embedding neck: AdaptiveMaxPool2d(1), flatten, BatchNorm1d (training), leaky_relu."""

    def __init__(self, channels):
        super().__init__()
        self.pool = nn.AdaptiveMaxPool2d(1)
        self.bn = nn.BatchNorm1d(channels)

    def forward(self, x):
        x = self.pool(x).flatten(1)
        x = self.bn(x)
        out = F.leaky_relu(x, negative_slope=0.2)
        return out


batch_size = 256
channels = 2048
height = 10
width = 10


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
