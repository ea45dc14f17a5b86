"""The convolutions in channels-last with one Triton kernel back to NCHW."""
