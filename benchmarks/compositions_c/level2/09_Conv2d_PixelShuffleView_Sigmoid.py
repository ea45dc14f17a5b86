import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """ESPCN output stage: 3x3 Conv2d to C*r*r channels, pixel shuffle written with view/permute/reshape, sigmoid."""

    def __init__(self, in_channels, out_channels, upscale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels * upscale * upscale, kernel_size=3, padding=1)
        self.upscale = upscale

    def forward(self, x):
        x = self.conv(x)
        b, c, h, w = x.shape
        r = self.upscale
        x = x.view(b, c // (r * r), r, r, h, w).permute(0, 1, 4, 2, 5, 3)
        x = x.reshape(b, c // (r * r), h * r, w * r)
        out = torch.sigmoid(x)
        return out


batch_size = 16
in_channels = 64
out_channels = 3
height = 128
width = 128
upscale = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, upscale]
