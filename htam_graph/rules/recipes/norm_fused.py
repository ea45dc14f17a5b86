"""reduction_structure.single_pass_norm: layer / group / instance norm modules and functional statistic
normalisations (RMS norm `x / sqrt(mean(x**2) + eps)`, L1 norm `x / mean(|x|)`), fused with the library op's
output, the elementwise ops before the norm and the elementwise ops after it, in one Triton kernel.

Norm statistics are Welford (mean, M2, count) states merged with Chan's formula, so inputs with a large mean
do not cancel; long rows with few programs are split across programs (partial states, then merged).
"""

from __future__ import annotations

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import Const, OpKind
from htam_graph.rules.recipes.reduce_plan import ReducePlan
from htam_graph.rules.recipes.reduce_recipe import ReductionRecipe

KEY = "reduction_structure.single_pass_norm"


class SinglePassNorm(ReductionRecipe):
    """Recipe for `reduction_structure.single_pass_norm`."""

    key = KEY
    summary = "Statistics in fp32 (Welford for norm modules); long rows are split across programs and merged."

    def accept(self, plan: ReducePlan) -> None:
        reducer = plan.reducer
        if reducer.kind is OpKind.NORM:
            if reducer.op == "nn_instance_norm" and reducer.param("track_running_stats") != Const(False):
                raise NotApplicable("instance norm with running statistics updates buffers in training mode")
            if reducer.op == "nn_instance_norm" and plan.full_rank < 3:
                raise NotApplicable("unbatched instance norm input")
            if reducer.op == "nn_group_norm" and plan.full_rank < 2:
                raise NotApplicable("group norm input without a channel dim")
            return
        if reducer.op in ("sum", "mean") and plan.mode == "normalise":
            return
        raise NotApplicable(
            f"{reducer.op} ({plan.mode} mode) is not a normalisation (norm module, or sum/mean broadcast back)"
        )
