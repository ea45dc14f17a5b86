import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Neural style loss: Gram matrix via bmm of (B, C, HW) features with their transpose, divide by H*W, squared error to a target Gram, mean over (1, 2), style weight."""

    def __init__(self, style_weight):
        super().__init__()
        self.style_weight = style_weight

    def forward(self, feat, target_gram):
        b, c, h, w = feat.shape
        f = feat.view(b, c, h * w)
        g = torch.bmm(f, f.transpose(1, 2)) / (h * w)
        out = (g - target_gram).pow(2).mean(dim=(1, 2)) * self.style_weight
        return out


batch_size = 16
channels = 256
height = 64
width = 64
style_weight = 100.0


def get_inputs():
    return [
        torch.randn(batch_size, channels, height, width),
        torch.randn(batch_size, channels, channels) * 0.1,
    ]


def get_init_inputs():
    return [style_weight]
