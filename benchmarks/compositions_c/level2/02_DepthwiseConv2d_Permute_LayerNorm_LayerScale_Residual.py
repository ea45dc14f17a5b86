import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """ConvNeXt-style spatial mixing: depthwise 7x7 Conv2d, permute to NHWC, LayerNorm over channels, layer-scale, permute back, residual add."""

    def __init__(self, dim, kernel_size, layer_scale_init):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size, padding=kernel_size // 2, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.gamma = nn.Parameter(layer_scale_init * torch.ones(dim))

    def forward(self, x):
        y = self.dwconv(x)
        y = y.permute(0, 2, 3, 1)
        y = self.norm(y)
        y = self.gamma * y
        out = x + y.permute(0, 3, 1, 2)
        return out


batch_size = 32
dim = 96
height = 56
width = 56
kernel_size = 7
layer_scale_init = 0.1


def get_inputs():
    return [torch.randn(batch_size, dim, height, width)]


def get_init_inputs():
    return [dim, kernel_size, layer_scale_init]
