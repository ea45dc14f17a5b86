import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Generalized-mean (GeM) pooling: clamp, pow p, global avg_pool2d, p-th root, flatten."""

    def __init__(self, p, eps):
        super().__init__()
        self.p = p
        self.eps = eps

    def forward(self, x):
        x = x.clamp(min=self.eps).pow(self.p)
        x = F.avg_pool2d(x, kernel_size=(x.size(-2), x.size(-1)))
        out = x.pow(1.0 / self.p).flatten(1)
        return out


batch_size = 64
channels = 2048
height = 14
width = 14
gem_p = 3.0
gem_eps = 1e-6


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [gem_p, gem_eps]
