import torch
import torch.nn as nn


def forward_fn(x: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:
    """RMS normalisation over the last dimension, then a learned per-feature gain.

    Args:
        x: input of shape (batch_size, tokens, hidden).
        gain: per-feature gain of shape (hidden,).
        eps: added to the mean square before the reciprocal square root.
    """
    wide = x.float()
    inv_rms = torch.rsqrt(wide.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (wide * inv_rms).type_as(x) * gain


class Model(nn.Module):
    """RMS normalisation with a gain, calling `forward_fn` with the module's parameters."""

    def __init__(self, hidden: int, eps: float = 1e-6):
        super(Model, self).__init__()  # noqa: UP008 - the form such tasks are written in
        import math

        self.gain = nn.Parameter(torch.ones(hidden) + torch.randn(hidden) / math.sqrt(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor, fn=forward_fn) -> torch.Tensor:
        return fn(x, self.gain, self.eps)


def get_inputs(batch_size: int = 8, tokens: int = 16, hidden: int = 64):
    return [torch.randn(batch_size, tokens, hidden)]


input_names = ["x"]
