"""The transposed convolutions as per-phase forward convolutions plus a Triton writer."""
