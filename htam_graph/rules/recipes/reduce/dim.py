"""reduction_structure.dim_reduction: sum / mean / prod / amax / amin / argmax / argmin over adjacent dims,
after an optional library op and elementwise prologue, with the elementwise ops on the reduced result fused.

The input is viewed as [outer, reduced, inner]: inner == 1 reduces contiguous rows, inner > 1 lets each
program own BLOCK_I contiguous columns and walk the reduced dim (coalesced). argmax/argmin keep the first
index on ties, like PyTorch. Few long reductions are split across programs and their partials merged.
"""

from __future__ import annotations

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import OpKind
from htam_graph.rules.recipes.reduce.plan import ReducePlan, reduce_dims
from htam_graph.rules.recipes.reduce.recipe import ReductionRecipe

KEY = "reduction_structure.dim_reduction"
_OPS = ("sum", "mean", "prod", "amax", "amin", "argmax", "argmin")


class DimReduction(ReductionRecipe):
    """Recipe for `reduction_structure.dim_reduction`."""

    key = KEY
    summary = (
        "fp32 accumulation; argmax/argmin break ties toward the lowest index; NaN inputs are not propagated."
    )

    def accept(self, plan: ReducePlan) -> None:
        reducer = plan.reducer
        if reducer.kind is not OpKind.REDUCTION or reducer.op not in _OPS:
            raise NotApplicable(f"{reducer.op} is not a sum/mean/prod/amax/amin/argmax/argmin reduction")
        if plan.mode != "reduce":
            raise NotApplicable(f"{reducer.op} is broadcast back over its input (a normalisation)")
        _check_adjacent(plan)


def _check_adjacent(plan: ReducePlan) -> None:
    _, dims = reduce_dims(plan.reducer)
    rank = plan.full_rank
    normal = sorted(d % rank for d in dims or ())
    if not normal or normal != list(range(normal[0], normal[-1] + 1)):
        raise NotApplicable(f"{plan.reducer.op} over non-adjacent dims {dims}")
