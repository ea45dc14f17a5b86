import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Mamba-style mixer piece: causal depthwise Conv1d (pad k-1, crop), SiLU, gate by silu(z), transpose, RMSNorm over channels."""

    def __init__(self, channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, padding=kernel_size - 1)
        self.norm = nn.RMSNorm(channels, eps=1e-5)

    def forward(self, x, z):
        seq_len = x.shape[-1]
        y = self.conv(x)[..., :seq_len]
        y = F.silu(y) * F.silu(z)
        out = self.norm(y.transpose(1, 2))
        return out


batch_size = 4
channels = 1536
length = 2048
kernel_size = 4


def get_inputs():
    return [
        torch.randn(batch_size, channels, length),
        torch.randn(batch_size, channels, length),
    ]


def get_init_inputs():
    return [channels, kernel_size]
