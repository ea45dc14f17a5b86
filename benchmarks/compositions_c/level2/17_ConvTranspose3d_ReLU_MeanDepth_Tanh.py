import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Volume-to-image decoder: ConvTranspose3d upsampling H and W, ReLU, mean over the depth dim (dim 2), tanh."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.up = nn.ConvTranspose3d(
            in_channels, out_channels, kernel_size=(3, 4, 4), stride=(1, 2, 2), padding=(1, 1, 1)
        )

    def forward(self, x):
        x = F.relu(self.up(x))
        x = torch.mean(x, dim=2)
        out = torch.tanh(x)
        return out


batch_size = 8
in_channels = 64
out_channels = 32
depth = 16
height = 32
width = 32


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
