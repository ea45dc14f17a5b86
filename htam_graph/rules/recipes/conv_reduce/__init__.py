"""The a library conv followed by a per-channel-tile epilogue (reductions, norms, pools)."""
