# A row softmax over many columns of torch.rand inputs: every output is between 1/(1.72 N) and e/(1.72 N),
# ~3e-5 to ~8e-5 here, inside atol 1e-4 of zeros (the tiny-output check, kernels_runtime/tinyout.py).
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


batch_size = 2
dim = 20000


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
