import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """3D segmentation head: pointwise Conv3d to class logits, softmax over classes (dim 1), multiply by a per-class weight buffer."""

    def __init__(self, in_channels, num_classes):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, num_classes, kernel_size=1)
        self.register_buffer(
            "class_weights", torch.linspace(0.5, 2.0, num_classes).view(1, num_classes, 1, 1, 1)
        )

    def forward(self, x):
        probs = torch.softmax(self.conv(x), dim=1)
        out = probs * self.class_weights
        return out


batch_size = 2
in_channels = 32
num_classes = 14
depth = 64
height = 64
width = 64


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, num_classes]
