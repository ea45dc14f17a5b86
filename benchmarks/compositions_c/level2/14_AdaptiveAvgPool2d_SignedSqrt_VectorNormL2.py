import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Pooled descriptor: AdaptiveAvgPool2d to a grid, flatten, signed square root, L2-normalise with vector_norm (keepdim)."""

    def __init__(self, output_size):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(output_size)

    def forward(self, x):
        x = self.pool(x).flatten(1)
        s = torch.sqrt(x.abs() + 1e-8)
        x = torch.where(x >= 0, s, -s)
        norm = torch.linalg.vector_norm(x, ord=2, dim=1, keepdim=True).clamp_min(1e-12)
        out = x / norm
        return out


batch_size = 128
channels = 512
height = 28
width = 28
output_size = 3


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [output_size]
