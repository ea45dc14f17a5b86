"""htam-graph: GPU kernels written in a loop guided by a Hierarchical Transition Graph memory.

Importing this package does no work: no environment reads, no clients, no torch.
"""

__version__ = "0.1.0"
