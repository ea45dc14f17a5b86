import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Class scoring: x @ W + b (torch.matmul), clamp, logsumexp over classes (keepdim), Mish."""

    def __init__(self, in_features, num_classes):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, num_classes) * in_features ** -0.5)
        self.bias = nn.Parameter(torch.zeros(num_classes))

    def forward(self, x):
        x = torch.matmul(x, self.weight) + self.bias
        x = torch.clamp(x, min=-3.0, max=3.0)
        x = torch.logsumexp(x, dim=1, keepdim=True)
        return F.mish(x)


batch_size = 8192
in_features = 1024
num_classes = 4096


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, num_classes]
