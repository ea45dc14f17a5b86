import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Demucs-style decoder step: add the encoder skip tensor, strided ConvTranspose1d, ReLU."""

    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super().__init__()
        self.up = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)

    def forward(self, x, skip):
        x = self.up(x + skip)
        out = F.relu(x)
        return out


batch_size = 16
in_channels = 256
out_channels = 128
length = 4096
kernel_size = 8
stride = 4


def get_inputs():
    return [
        torch.randn(batch_size, in_channels, length),
        torch.randn(batch_size, in_channels, length),
    ]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride]
