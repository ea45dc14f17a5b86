# htam-adversarial
# pitfall: 11 hard-coded shapes: the element count of the main shape is baked in (remembered from the first call)
# task: level1/22_Tanh.py
# expected_kind: mismatch
# expected_check: extra_shapes|correctness|reference_kept_alive_and_poisoned
# runs_on: cpu,gpu
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    e = tl.exp(2.0 * x)
    tl.store(out_ptr + offs, 1.0 - 2.0 / (e + 1.0), mask=mask)


def launch_tanh(x, out, n):
    BLOCK = 4096
    tanh_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)


_N = None  # the element count of the first call, then assumed forever (a shape "baked in" like a literal)


class ModelNew(nn.Module):
    def forward(self, x):
        global _N
        if _N is None:
            _N = x.numel()
        out = torch.empty_like(x)
        launch_tanh(x, out, min(_N, x.numel()))
        return out
