import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """CTC output head: clipped ReLU (hardtanh 0..20), Linear to output tokens, log_softmax over tokens, transpose to (T, B, V)."""

    def __init__(self, hidden_size, vocab_size):
        super().__init__()
        self.fc = nn.Linear(hidden_size, vocab_size)

    def forward(self, x):
        x = F.hardtanh(x, 0.0, 20.0)
        x = self.fc(x)
        out = F.log_softmax(x, dim=-1).transpose(0, 1)
        return out


batch_size = 32
seq_len = 500
hidden_size = 1024
vocab_size = 1000


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, vocab_size]
