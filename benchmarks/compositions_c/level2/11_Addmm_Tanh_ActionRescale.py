import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Squashed policy mean head: torch.addmm linear layer, tanh, rescale to action bounds with registered buffers."""

    def __init__(self, hidden_dim, action_dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_dim, action_dim) / hidden_dim ** 0.5)
        self.bias = nn.Parameter(torch.randn(action_dim) * 0.02)
        self.register_buffer("action_scale", torch.linspace(0.5, 2.0, action_dim))
        self.register_buffer("action_bias", torch.linspace(-0.25, 0.25, action_dim))

    def forward(self, x):
        a = torch.tanh(torch.addmm(self.bias, x, self.weight))
        out = a * self.action_scale + self.action_bias
        return out


batch_size = 16384
hidden_dim = 1024
action_dim = 512


def get_inputs():
    return [torch.randn(batch_size, hidden_dim)]


def get_init_inputs():
    return [hidden_dim, action_dim]
