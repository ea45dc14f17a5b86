import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """VICReg variance term: expander layer via torch.addmm, variance over the batch (dim 0), relu(gamma - sqrt(var + eps))."""

    def __init__(self, in_features, out_features, eps, gamma):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.eps = eps
        self.gamma = gamma

    def forward(self, x):
        z = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        std = torch.sqrt(z.var(dim=0) + self.eps)
        out = F.relu(self.gamma - std)
        return out


batch_size = 4096
in_features = 2048
out_features = 4096
eps = 1e-4
gamma = 1.0


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, eps, gamma]
