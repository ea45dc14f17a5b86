# htam-candidate: a hand-written CUDA LeakyReLU built with load_inline (GPU only; CPU: unsupported_on_device)
# task: level1/20_LeakyReLU.py
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void leaky_relu_kernel(const float* __restrict__ x, float* __restrict__ out, long n, float slope) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long stride = (long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        float v = x[i];
        out[i] = v >= 0.f ? v : v * slope;
    }
}

torch::Tensor leaky_relu_cuda(torch::Tensor x, double slope) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "expects a float32 CUDA tensor");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    long n = xc.numel();
    int threads = 256;
    long blocks = (n + threads - 1) / threads;
    if (blocks > 65535L * 16) blocks = 65535L * 16;
    leaky_relu_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), out.data_ptr<float>(), n, (float)slope);
    return out;
}
"""

cpp_source = "torch::Tensor leaky_relu_cuda(torch::Tensor x, double slope);"

_ext = load_inline(
    name="htam_leaky_relu",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["leaky_relu_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.leaky_relu_cuda(x, self.negative_slope)
