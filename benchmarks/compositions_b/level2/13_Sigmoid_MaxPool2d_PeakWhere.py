import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """CenterNet heatmap peak extraction: sigmoid, stride-1 max_pool2d, keep only local maxima via torch.where(hmax == heat)."""

    def __init__(self, kernel_size):
        super().__init__()
        self.kernel_size = kernel_size

    def forward(self, x):
        heat = torch.sigmoid(x)
        hmax = F.max_pool2d(heat, self.kernel_size, stride=1, padding=(self.kernel_size - 1) // 2)
        out = torch.where(hmax == heat, heat, 0.0)
        return out


batch_size = 32
num_classes = 80
height = 128
width = 128
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, num_classes, height, width)]


def get_init_inputs():
    return [kernel_size]
