import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """2x upsampling ConvTranspose3d, ELU, sum over channels (keepdim), scaled sigmoid map."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding):
        super().__init__()
        self.conv_t = nn.ConvTranspose3d(
            in_channels, out_channels, kernel_size,
            stride=stride, padding=padding, output_padding=output_padding,
        )

    def forward(self, x):
        x = self.conv_t(x)
        x = F.elu(x)
        x = torch.sum(x, dim=1, keepdim=True)
        return torch.sigmoid(x * 0.25)


batch_size = 16
in_channels = 32
out_channels = 16
depth = 16
height = 32
width = 32
kernel_size = 3
stride = 2
padding = 1
output_padding = 1


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding]
