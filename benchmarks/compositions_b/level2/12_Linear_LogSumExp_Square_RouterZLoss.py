import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """MoE router z-loss per token: router Linear, logsumexp over experts, square, scale by a coefficient."""

    def __init__(self, hidden_size, num_experts, z_coef):
        super().__init__()
        self.router = nn.Linear(hidden_size, num_experts, bias=False)
        self.z_coef = z_coef

    def forward(self, x):
        logits = self.router(x)
        z = torch.logsumexp(logits, dim=-1)
        out = z.pow(2) * self.z_coef
        return out


batch_size = 8
seq_len = 2048
hidden_size = 2048
num_experts = 64
z_coef = 0.1


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, num_experts, z_coef]
