import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """3D ResNet stem tail: BatchNorm3d (training), ReLU, MaxPool3d kernel 3 stride 2 padding 1."""

    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm3d(channels)
        self.pool = nn.MaxPool3d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        x = F.relu(self.bn(x))
        out = self.pool(x)
        return out


batch_size = 8
channels = 64
frames = 16
height = 56
width = 56


def get_inputs():
    return [torch.randn(batch_size, channels, frames, height, width)]


def get_init_inputs():
    return [channels]
