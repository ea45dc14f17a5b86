# htam-adversarial
# pitfall: 7 wrong dtype: returns float64
# task: level1/22_Tanh.py
# expected_kind: mismatch
# expected_check: correctness|extra_shapes
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


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        launch_tanh(x, out, x.numel())
        return out.to(torch.float64)
