# htam-adversarial
# pitfall: 8 NaN output: the kernel writes NaN
# task: level1/22_Tanh.py
# expected_kind: mismatch
# expected_check: reference_kept_alive_and_poisoned|correctness|extra_shapes
# runs_on: cpu,gpu
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def nan_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, (x - x) / (x - x), mask=offs < n)  # 0/0


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        nan_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096)
        return out
