import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Sequence downsampling: MaxPool1d (k=4, s=4), SiLU, mean over channels (dim=1), scalar scale."""

    def __init__(self, kernel_size, stride, scale):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size, stride=stride)
        self.scale = scale

    def forward(self, x):
        x = self.pool(x)
        x = F.silu(x)
        x = torch.mean(x, dim=1)
        return x * self.scale


batch_size = 128
channels = 128
length = 4096
kernel_size = 4
stride = 4
scale = 2.0


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [kernel_size, stride, scale]
