import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Attention scores: batched Q @ K^T (bmm), 1/sqrt(d) scaling, additive causal-mask buffer, softmax over keys."""

    def __init__(self, seq_len, head_dim):
        super().__init__()
        self.scale = head_dim ** -0.5
        mask = torch.triu(torch.full((seq_len, seq_len), -1.0e4), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, q, kt):
        s = torch.bmm(q, kt)
        s = s * self.scale
        s = s + self.mask
        return torch.softmax(s, dim=-1)


batch_heads = 64
seq_len = 512
head_dim = 256


def get_inputs():
    q = torch.randn(batch_heads, seq_len, head_dim)
    kt = torch.randn(batch_heads, head_dim, seq_len)
    return [q, kt]


def get_init_inputs():
    return [seq_len, head_dim]
