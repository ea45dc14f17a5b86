import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """GELU, AvgPool3d(2), Frobenius-norm normalisation of the whole tensor, scalar rescale."""

    def __init__(self, pool_size, scale):
        super().__init__()
        self.pool = nn.AvgPool3d(pool_size)
        self.scale = scale

    def forward(self, x):
        x = F.gelu(x)
        x = self.pool(x)
        x = x / torch.norm(x, p="fro")
        return x * self.scale


batch_size = 16
channels = 32
depth = 32
height = 64
width = 64
pool_size = 2
scale = 1000.0


def get_inputs():
    return [torch.randn(batch_size, channels, depth, height, width)]


def get_init_inputs():
    return [pool_size, scale]
