"""The a library GEMM followed by one fused kernel per output row (reductions, softmax, norms)."""
