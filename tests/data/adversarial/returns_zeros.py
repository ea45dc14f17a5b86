# htam-adversarial
# pitfall: 8 loose tolerance: returns zeros written by a kernel
# task: level1/22_Tanh.py
# expected_kind: mismatch
# expected_check: correctness|extra_shapes
# runs_on: cpu,gpu
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        zero_kernel[(triton.cdiv(n, 4096),)](out, n, BLOCK=4096)
        return out
