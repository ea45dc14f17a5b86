import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Pre-norm FFN up-projection with squared ReLU: LayerNorm without affine, torch.matmul, in-place relu then square."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.d_model = d_model
        self.weight = nn.Parameter(torch.randn(d_model, d_ff) / d_model ** 0.5)

    def forward(self, x):
        h = F.layer_norm(x, (self.d_model,))
        h = torch.matmul(h, self.weight)
        out = h.relu_().pow_(2)
        return out


batch_size = 8
seq_len = 1024
d_model = 1024
d_ff = 4096


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, d_ff]
