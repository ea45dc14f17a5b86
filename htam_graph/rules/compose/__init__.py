"""Kernels composed from the forward's operations (fusion.composed_kernels): any chain of elementwise ops with
at most one reduction or normalisation per kernel, around library ops kept in PyTorch. See recipe.py."""

from htam_graph.rules.compose.recipe import (
    KEY,
    ComposedKernels,
    ComposedPlan,
    composed_parts,
    forward_lines,
    plan_composed,
    probe_composed,
)

__all__ = [
    "KEY",
    "ComposedKernels",
    "ComposedPlan",
    "composed_parts",
    "forward_lines",
    "plan_composed",
    "probe_composed",
]
