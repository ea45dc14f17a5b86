"""The whole-tensor losses: a pointwise term summed in a deterministic two-stage reduction."""
