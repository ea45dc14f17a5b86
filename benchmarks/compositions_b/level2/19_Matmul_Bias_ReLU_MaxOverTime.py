import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Sequence-first projection: torch.matmul of (L, B, D) by a weight, add bias, ReLU, max over time (dim 0)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features) / in_features ** 0.5)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.02)

    def forward(self, x):
        h = torch.relu(torch.matmul(x, self.weight) + self.bias)
        out = torch.max(h, dim=0).values
        return out


seq_len = 256
batch_size = 64
in_features = 512
out_features = 1024


def get_inputs():
    return [torch.randn(seq_len, batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
