"""The algebraic rewrites: dropped copies, diagonal matmuls, reductions taken before a linear."""
