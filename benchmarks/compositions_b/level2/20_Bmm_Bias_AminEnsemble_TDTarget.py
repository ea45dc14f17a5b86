import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Ensemble-critic TD target: per-member bmm, add bias, pessimistic amin over the ensemble (dim 0), reward + gamma * q."""

    def __init__(self, num_critics, hidden_dim, num_quantiles, gamma):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_critics, hidden_dim, num_quantiles) / hidden_dim ** 0.5)
        self.bias = nn.Parameter(torch.randn(num_critics, 1, num_quantiles) * 0.02)
        self.gamma = gamma

    def forward(self, h, reward):
        q = torch.bmm(h, self.weight) + self.bias
        q = torch.amin(q, dim=0)
        out = reward + self.gamma * q
        return out


num_critics = 10
batch_size = 16384
hidden_dim = 256
num_quantiles = 64
gamma = 0.99


def get_inputs():
    return [
        torch.randn(num_critics, batch_size, hidden_dim),
        torch.randn(batch_size, 1),
    ]


def get_init_inputs():
    return [num_critics, hidden_dim, num_quantiles, gamma]
