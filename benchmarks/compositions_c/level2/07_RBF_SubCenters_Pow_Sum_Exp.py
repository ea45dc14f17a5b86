import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Gaussian RBF layer: broadcast-subtract learned centres, square, sum over features, exp(-gamma * distance)."""

    def __init__(self, in_features, num_centers, gamma):
        super().__init__()
        self.centers = nn.Parameter(torch.randn(num_centers, in_features))
        self.gamma = gamma

    def forward(self, x):
        d = (x.unsqueeze(1) - self.centers).pow(2).sum(dim=-1)
        out = torch.exp(-self.gamma * d)
        return out


batch_size = 100000
in_features = 64
num_centers = 20
gamma = 0.01


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, num_centers, gamma]
