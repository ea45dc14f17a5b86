import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Conv-TasNet encoder: strided Conv1d waveform filterbank (no bias), ReLU, global layer norm as GroupNorm(1, N)."""

    def __init__(self, num_filters, kernel_size):
        super().__init__()
        self.encoder = nn.Conv1d(1, num_filters, kernel_size, stride=kernel_size // 2, bias=False)
        self.norm = nn.GroupNorm(1, num_filters, eps=1e-8)

    def forward(self, wav):
        x = F.relu(self.encoder(wav))
        out = self.norm(x)
        return out


batch_size = 16
num_samples = 300000
num_filters = 256
kernel_size = 32


def get_inputs():
    return [torch.randn(batch_size, 1, num_samples)]


def get_init_inputs():
    return [num_filters, kernel_size]
