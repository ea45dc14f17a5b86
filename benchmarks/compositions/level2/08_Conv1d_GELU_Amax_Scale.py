import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Text-CNN feature block: Conv1d, GELU, global max over the sequence (amax, dim=-1), per-channel scale."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.scale = nn.Parameter(1.0 + 0.1 * torch.randn(out_channels))

    def forward(self, x):
        x = self.conv(x)
        x = F.gelu(x)
        x = torch.amax(x, dim=-1)
        return x * self.scale


batch_size = 128
in_channels = 64
out_channels = 128
length = 2048
kernel_size = 5


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
