import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Concatenated ReLU block: Linear, torch.cat([relu(y), relu(-y)], -1), LayerNorm over the doubled width."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(2 * out_features)

    def forward(self, x):
        y = self.fc(x)
        y = torch.cat([F.relu(y), F.relu(-y)], dim=-1)
        out = self.norm(y)
        return out


batch_size = 16
seq_len = 512
in_features = 1024
out_features = 1536


def get_inputs():
    return [torch.randn(batch_size, seq_len, in_features)]


def get_init_inputs():
    return [in_features, out_features]
