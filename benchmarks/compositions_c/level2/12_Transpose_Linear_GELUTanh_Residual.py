import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """MLP-Mixer token mixing: transpose to (B, C, P), Linear over patches, tanh-GELU, transpose back, residual add."""

    def __init__(self, num_patches):
        super().__init__()
        self.token_fc = nn.Linear(num_patches, num_patches)

    def forward(self, x):
        y = x.transpose(1, 2)
        y = F.gelu(self.token_fc(y), approximate="tanh")
        out = x + y.transpose(1, 2)
        return out


batch_size = 64
num_patches = 196
channels = 768


def get_inputs():
    return [torch.randn(batch_size, num_patches, channels)]


def get_init_inputs():
    return [num_patches]
