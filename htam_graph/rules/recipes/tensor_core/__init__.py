"""Tensor cores under fp32-strict: the forward's large fp32 GEMMs as 3xTF32 Triton GEMMs."""
