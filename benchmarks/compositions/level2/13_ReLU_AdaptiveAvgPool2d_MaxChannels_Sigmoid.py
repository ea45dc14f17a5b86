import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Spatial-attention map: ReLU, AdaptiveAvgPool2d to a fixed grid, max over channels (dim=1), sigmoid."""

    def __init__(self, output_size):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(output_size)

    def forward(self, x):
        x = F.relu(x)
        x = self.pool(x)
        x = torch.max(x, dim=1).values
        return torch.sigmoid(x)


batch_size = 128
channels = 256
height = 32
width = 32
output_size = (16, 16)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [output_size]
