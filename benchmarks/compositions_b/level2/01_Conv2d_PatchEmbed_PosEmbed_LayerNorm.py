import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """ViT patch embedding: strided Conv2d, flatten/transpose to tokens, add learned position embedding, LayerNorm."""

    def __init__(self, in_channels, embed_dim, patch_size, image_size):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, embed_dim, kernel_size=patch_size, stride=patch_size)
        num_patches = (image_size // patch_size) ** 2
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches, embed_dim) * 0.02)
        self.norm = nn.LayerNorm(embed_dim)

    def forward(self, x):
        x = self.proj(x)
        x = x.flatten(2).transpose(1, 2)
        x = x + self.pos_embed
        out = self.norm(x)
        return out


batch_size = 128
in_channels = 3
image_size = 224
patch_size = 16
embed_dim = 768


def get_inputs():
    return [torch.randn(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [in_channels, embed_dim, patch_size, image_size]
