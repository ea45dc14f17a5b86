import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """HiFi-GAN upsampling stage: leaky_relu(0.1) then strided ConvTranspose1d."""

    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super().__init__()
        self.up = nn.ConvTranspose1d(
            in_channels, out_channels, kernel_size, stride=stride, padding=(kernel_size - stride) // 2
        )

    def forward(self, x):
        x = F.leaky_relu(x, 0.1)
        out = self.up(x)
        return out


batch_size = 8
in_channels = 512
out_channels = 256
length = 2048
kernel_size = 16
stride = 8


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride]
