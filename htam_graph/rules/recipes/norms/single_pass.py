"""reduction_structure.single_pass_norm: layer / group / instance norm modules and functional statistic
normalisations (RMS norm `x / sqrt(mean(x**2) + eps)`, L1 norm `x / mean(|x|)`), fused with the library op's
output, the elementwise ops before the norm and the elementwise ops after it, in one Triton kernel.

Short rows (a row fits one BLOCK tile: layer norm over a few dozen channels, group norm after a GEMM) run the
kernel of rows.py: several whole rows per program in registers, mean then centred variance, one read
and one write. Longer rows keep the tiled kernel of reduce/kernel.py, whose statistics are Welford (mean, M2,
count) states merged with Chan's formula, so inputs with a large mean do not cancel; long rows with few
programs are split across programs (partial states, then merged). A conv's or an nn.Linear's bias moves out
of the library call into the kernel (library_epilogue.fold_conv_bias / fold_linear_bias).
"""

from __future__ import annotations

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import Const, OpKind
from htam_graph.rules.recipes.reduce.plan import ReducePlan
from htam_graph.rules.recipes.reduce.recipe import ReductionRecipe

KEY = "reduction_structure.single_pass_norm"


class SinglePassNorm(ReductionRecipe):
    """Recipe for `reduction_structure.single_pass_norm`."""

    key = KEY
    summary = (
        "Statistics in fp32 (short rows: whole rows in registers, several per program; long rows: Welford,"
        " split across programs and merged)."
    )
    fold_library_bias = True  # conv / GEMM -> norm: the library op without bias; the kernel adds it

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
            f"{reducer.op} ({plan.mode} mode) is not a normalisation (norm module, "
            "or sum/mean broadcast back)"
        )
