"""Tensor cores under fp32-strict: the forward's large fp32 GEMMs and convs as 3xTF32 Triton kernels."""
