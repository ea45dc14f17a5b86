# htam-candidate: a hand-written CUDA tanh built with load_inline (GPU only; CPU: unsupported_on_device)
# task: level1/22_Tanh.py
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void tanh_kernel(const float* __restrict__ x, float* __restrict__ out, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long stride = (long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) out[i] = tanhf(x[i]);
}

torch::Tensor tanh_cuda(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    long n = xc.numel();
    int threads = 256;
    long blocks = (n + threads - 1) / threads;
    if (blocks > 65535L * 16) blocks = 65535L * 16;
    tanh_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

_ext = load_inline(
    name="htam_tanh",
    cpp_sources="torch::Tensor tanh_cuda(torch::Tensor x);",
    cuda_sources=cuda_source,
    functions=["tanh_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.tanh_cuda(x)
