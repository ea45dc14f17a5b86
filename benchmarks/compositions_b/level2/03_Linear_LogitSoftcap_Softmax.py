import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Output head with logit soft-capping: Linear, cap * tanh(logits / cap), softmax over the vocabulary."""

    def __init__(self, hidden_size, vocab_size, softcap):
        super().__init__()
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)
        self.softcap = softcap

    def forward(self, x):
        logits = self.lm_head(x)
        logits = torch.tanh(logits / self.softcap) * self.softcap
        out = torch.softmax(logits, dim=-1)
        return out


batch_size = 4
seq_len = 1024
hidden_size = 1536
vocab_size = 6000
softcap = 30.0


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, vocab_size, softcap]
