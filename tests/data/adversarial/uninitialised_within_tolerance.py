# htam-adversarial
# pitfall: 16 uninitialised scratch that passes the tolerance: tanh + 1e-8 * (garbage in [-1e3, 1e3] after NaN->0)
# task: level1/22_Tanh.py
# expected_kind: mismatch
# expected_check: deterministic_rerun
# runs_on: gpu
# (CPU: glibc malloc decides which chunk comes back, so the two runs see different poison only most of the
# time; the CUDA caching allocator makes the check reliable. The CPU test would be flaky, so it runs on the GPU.)
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
        junk = torch.empty_like(x)  # never written: whatever the allocator hands back
        junk = torch.nan_to_num(junk, nan=0.0, posinf=0.0, neginf=0.0).clamp(-1e3, 1e3)
        return out + junk * 1e-8  # at most 1e-5: inside atol=1e-4
