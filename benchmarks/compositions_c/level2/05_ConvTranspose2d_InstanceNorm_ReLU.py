import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """CycleGAN decoder upsampling: ConvTranspose2d (stride 2, output_padding 1), affine InstanceNorm2d, ReLU."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.up = nn.ConvTranspose2d(
            in_channels, out_channels, kernel_size=3, stride=2, padding=1, output_padding=1, bias=False
        )
        self.norm = nn.InstanceNorm2d(out_channels, affine=True)

    def forward(self, x):
        x = self.norm(self.up(x))
        out = torch.relu(x)
        return out


batch_size = 16
in_channels = 128
out_channels = 64
height = 96
width = 96


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
