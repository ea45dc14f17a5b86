# Triton candidates for row_softmax_wide.py: one honest two-pass softmax and the outputs a tolerance of 1e-4
# cannot tell from it on that task (zeros, a constant, a uniform 1/N, and the right answer on the first call
# per shape only). Each class body below is appended after this prefix by the tests.
import torch
import torch.nn as nn  # noqa: F401 - for the ModelNew(nn.Module) the tests append
import triton
import triton.language as tl


@triton.jit
def softmax_rows(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * n_cols
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + cols, mask=cols < n_cols, other=float("-inf"))
        new_m = tl.maximum(m, x)
        s = s * tl.exp(m - new_m) + tl.where(cols < n_cols, tl.exp(x - new_m), 0.0)
        m = tl.where(new_m == float("-inf"), m, new_m)
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - row_max), axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + cols, mask=cols < n_cols, other=0.0)
        tl.store(out_ptr + base + cols, tl.exp(x - row_max) / total, mask=cols < n_cols)


@triton.jit
def fill(out_ptr, n, value, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros((BLOCK,), tl.float32) + value, mask=offs < n)


@triton.jit
def copy(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    softmax_rows[(x.shape[0],)](x, out, x.shape[1], BLOCK=4096)
    return out


def filled(x: torch.Tensor, value: float) -> torch.Tensor:
    out = torch.empty_like(x)
    fill[(triton.cdiv(out.numel(), 4096),)](out, out.numel(), value, BLOCK=4096)
    return out
