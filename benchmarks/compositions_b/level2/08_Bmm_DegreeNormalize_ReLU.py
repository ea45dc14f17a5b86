import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """GNN mean aggregation: bmm(adjacency, features), divide by clamped node degree (adjacency row sum), ReLU."""

    def __init__(self):
        super().__init__()

    def forward(self, adj, feats):
        agg = torch.bmm(adj, feats)
        deg = adj.sum(dim=-1, keepdim=True).clamp(min=1.0)
        out = F.relu(agg / deg)
        return out


batch_size = 32
num_nodes = 1024
num_features = 256


def get_inputs():
    return [
        torch.rand(batch_size, num_nodes, num_nodes),
        torch.randn(batch_size, num_nodes, num_features),
    ]


def get_init_inputs():
    return []
