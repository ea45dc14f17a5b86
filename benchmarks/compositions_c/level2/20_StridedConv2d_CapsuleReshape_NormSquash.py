import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """CapsNet primary capsules: strided Conv2d, view/permute/reshape to (B, N, caps_dim), squash using torch.norm over the last dim."""

    def __init__(self, in_channels, caps_channels, caps_dim, kernel_size, stride):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, caps_channels * caps_dim, kernel_size, stride=stride)
        self.caps_channels = caps_channels
        self.caps_dim = caps_dim

    def forward(self, x):
        u = self.conv(x)
        b, _, h, w = u.shape
        u = u.view(b, self.caps_channels, self.caps_dim, h, w).permute(0, 1, 3, 4, 2)
        u = u.reshape(b, -1, self.caps_dim)
        n = torch.norm(u, dim=-1, keepdim=True)
        n2 = n * n
        out = u * (n2 / (1.0 + n2)) / (n + 1e-8)
        return out


batch_size = 128
in_channels = 256
height = 20
width = 20
caps_channels = 32
caps_dim = 8
kernel_size = 9
stride = 2


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, caps_channels, caps_dim, kernel_size, stride]
