"""reduction_structure.online_logsumexp: logsumexp / softmax / log_softmax over ANY dim (not only the last) or
adjacent dims taken together (a softmax over a flattening view, see rules/analysis/views.py), fused with the
library op's output, the elementwise ops before it and the elementwise ops after it.

One streaming pass keeps a running max and a rescaled sum of exponentials per lane (merged across lanes and
split programs with the same (max, sum) combine); softmax writes in a second pass over the same tile.
"""

from __future__ import annotations

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import OpKind
from htam_graph.rules.recipes.reduce.plan import ReducePlan, reduce_dims
from htam_graph.rules.recipes.reduce.recipe import ReductionRecipe

KEY = "reduction_structure.online_logsumexp"


class OnlineLogsumexp(ReductionRecipe):
    """Recipe for `reduction_structure.online_logsumexp`."""

    key = KEY
    summary = "Running max + rescaled sum of exp per lane (fp32); all -inf rows give -inf, never NaN."

    def accept(self, plan: ReducePlan) -> None:
        reducer = plan.reducer
        if reducer.op == "logsumexp":
            if plan.mode != "reduce":
                raise NotApplicable("logsumexp broadcast back over its input is not fused")
        elif reducer.kind is not OpKind.SOFTMAX:
            raise NotApplicable(f"{reducer.op} is not logsumexp / softmax / log_softmax")
        _, dims = reduce_dims(reducer)
        if dims is None:
            raise NotApplicable(f"{reducer.op} without dims")
        # softmax over several (adjacent) dims: the analysis folded `x.view(b, c, -1)` -> softmax -> view back
        rank = plan.full_rank
        normal = sorted(d % rank for d in dims)
        if normal != list(range(normal[0], normal[-1] + 1)):
            raise NotApplicable(f"{reducer.op} over non-adjacent dims {dims}")
