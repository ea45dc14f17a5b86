"""The runtime's isolated worker process: everything that imports torch or runs candidate code.

Its entry is `__main__.py` (`python -m htam_graph.kernels_runtime.worker`); `ncu_target.py` is the other
process entry, the one Nsight Compute profiles.
"""
