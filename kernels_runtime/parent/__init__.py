"""The runtime's side in the caller's process: spawns workers, reads their results; no torch, no candidate code."""
