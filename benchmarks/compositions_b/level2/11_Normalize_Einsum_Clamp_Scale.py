import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Cosine classifier head: L2-normalise features, einsum with class prototypes, clamp to [-1, 1], multiply by a scale."""

    def __init__(self, feat_dim, num_classes, scale):
        super().__init__()
        self.prototypes = nn.Parameter(F.normalize(torch.randn(num_classes, feat_dim), dim=1))
        self.scale = scale

    def forward(self, x):
        x = F.normalize(x, p=2.0, dim=1, eps=1e-12)
        cos = torch.einsum("bd,cd->bc", x, self.prototypes)
        out = cos.clamp(-1.0, 1.0) * self.scale
        return out


batch_size = 8192
feat_dim = 1024
num_classes = 5000
scale = 16.0


def get_inputs():
    return [torch.randn(batch_size, feat_dim)]


def get_init_inputs():
    return [feat_dim, num_classes, scale]
