import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """WaveNet residual layer: dilated Conv1d to 2C channels, tanh(a) * sigmoid(b) gate, residual add, scale by sqrt(0.5)."""

    def __init__(self, channels, kernel_size, dilation):
        super().__init__()
        self.conv = nn.Conv1d(
            channels,
            2 * channels,
            kernel_size,
            dilation=dilation,
            padding=dilation * (kernel_size - 1) // 2,
        )

    def forward(self, x):
        h = self.conv(x)
        a, b = h.chunk(2, dim=1)
        h = torch.tanh(a) * torch.sigmoid(b)
        out = (h + x) * 0.7071067811865476
        return out


batch_size = 16
channels = 128
length = 8000
kernel_size = 3
dilation = 4


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [channels, kernel_size, dilation]
