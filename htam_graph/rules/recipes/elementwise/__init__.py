"""The elementwise fusion: a chain of pointwise ops, a library op's epilogue, its TF32 variant."""
