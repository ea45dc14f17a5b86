import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Residual maxout layer: Linear to features * pieces, view, max over the pieces (last dim), scale, add the input."""

    def __init__(self, features, pieces, alpha):
        super().__init__()
        self.fc = nn.Linear(features, features * pieces)
        self.features = features
        self.pieces = pieces
        self.alpha = alpha

    def forward(self, x):
        y = self.fc(x)
        y = y.view(x.shape[0], self.features, self.pieces)
        y = y.max(dim=-1)[0]
        out = x + self.alpha * y
        return out


batch_size = 8192
features = 1024
pieces = 4
alpha = 0.5


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, pieces, alpha]
