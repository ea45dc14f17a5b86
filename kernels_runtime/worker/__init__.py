"""The runtime's isolated worker process: every module that imports torch at module level or runs candidate
code.

Its entry is `__main__.py` (`python -m htam_graph.kernels_runtime.worker`); `ncu_target.py` is the other
process entry, the one Nsight Compute profiles.
"""
