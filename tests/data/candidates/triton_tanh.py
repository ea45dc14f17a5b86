# htam-candidate: a hand-written Triton tanh (tanh(x) = 1 - 2 / (exp(2x) + 1)); interpreter and GPU
# task: level1/22_Tanh.py
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    e = tl.exp(2.0 * x)
    tl.store(out_ptr + offs, 1.0 - 2.0 / (e + 1.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        block = 4096
        tanh_kernel[(triton.cdiv(n, block),)](x, out, n, BLOCK=block)
        return out
