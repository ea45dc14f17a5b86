"""The depthwise convolutions as one direct Triton kernel."""
