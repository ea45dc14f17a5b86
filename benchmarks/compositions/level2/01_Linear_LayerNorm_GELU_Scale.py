import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Projection (Linear) followed by LayerNorm, GELU and a constant output scale."""

    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features)
        self.scale = scale

    def forward(self, x):
        x = self.linear(x)
        x = self.norm(x)
        x = F.gelu(x)
        return x * self.scale


batch_size = 2048
in_features = 4096
out_features = 4096
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
