"""Kernel text of each accumulation family (see reducers.py): accumulators, their update, the per-row values.

Accumulators are [BLOCK_R, BLOCK_K] tiles updated elementwise inside the loop over the reduced index (masked
lanes leave them unchanged) and reduced over axis 0 once the loop ends, giving [BLOCK_K] row values:
`row_sum`, `row_max`, `row_min`, `row_prod`, or for moments `row_mean` and `row_m2` (the sum of squared
deviations), all in fp32. `n` is the row length as a float.
"""

from __future__ import annotations

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.codegen.triton_math import render_literal
from htam_graph.rules.compose.cross_entropy import (
    target_accumulate,
    target_finalize,
    target_init,
    target_row_value,
)
from htam_graph.rules.compose.reducers import Reduction, correction_of

__all__ = ["PROD_COMBINE", "accumulate_lines", "element_value", "finalize_lines", "init_lines", "row_value"]

TILE = "[BLOCK_R, BLOCK_K]"
NEG_INF = 'float("-inf")'
POS_INF = 'float("inf")'

PROD_COMBINE = """@triton.jit
def _prod_combine(a, b):
    return a * b
"""

_INIT = {
    "sum": [f"acc = tl.zeros({TILE}, dtype=tl.float32)"],
    "max": [f"acc = tl.full({TILE}, {NEG_INF}, tl.float32)"],
    "min": [f"acc = tl.full({TILE}, {POS_INF}, tl.float32)"],
    "prod": [f"acc = tl.full({TILE}, 1.0, tl.float32)"],
    "lse": [
        f"run_max = tl.full({TILE}, {NEG_INF}, tl.float32)",
        f"run_sum = tl.zeros({TILE}, dtype=tl.float32)",
    ],
    "moments": [
        f"acc = tl.zeros({TILE}, dtype=tl.float32)  # sum of (value - shift)",
        f"acc_sq = tl.zeros({TILE}, dtype=tl.float32)  # sum of (value - shift) ** 2",
    ],
}

# {t}: the accumulated expression of the tile's values (the family's transform)
_ACCUMULATE = {
    "sum": ["acc += tl.where(mask, {t}, 0.0)"],
    "max": [f"acc = tl.maximum(acc, tl.where(mask, {{t}}, {NEG_INF}))"],
    "min": [f"acc = tl.minimum(acc, tl.where(mask, {{t}}, {POS_INF}))"],
    "prod": ["acc = acc * tl.where(mask, {t}, 1.0)"],
    "lse": [
        f"value = tl.where(mask, {{t}}, {NEG_INF})",
        "new_max = tl.maximum(run_max, value)",
        f"safe_max = tl.where(new_max == {NEG_INF}, 0.0, new_max)  # no -inf - -inf",
        "run_sum = run_sum * tl.exp(run_max - safe_max) + tl.exp(value - safe_max)",
        "run_max = new_max",
    ],
    "moments": [
        "dev = tl.where(mask, {t} - shift, 0.0)",
        "acc += dev",
        "acc_sq += dev * dev",
    ],
}

_FINALIZE = {
    "sum": ["row_sum = tl.sum(acc, axis=0)"],
    "max": ["row_max = tl.max(acc, axis=0)"],
    "min": ["row_min = tl.min(acc, axis=0)"],
    "prod": ["row_prod = tl.reduce(acc, 0, _prod_combine)"],
    "lse": [
        "row_max = tl.max(run_max, axis=0)",
        f"row_max = tl.where(row_max == {NEG_INF}, 0.0, row_max)",
        "row_sum = tl.sum(run_sum * tl.exp(run_max - row_max[None, :]), axis=0)",
    ],
    "moments": [
        "dev_sum = tl.sum(acc, axis=0)",
        "row_mean = tl.sum(shift, axis=0) + dev_sum / n",
        "row_m2 = tl.maximum(tl.sum(acc_sq, axis=0) - dev_sum * dev_sum / n, 0.0)",
    ],
}


def init_lines(red: Reduction) -> list[str]:
    extra = target_init(red.node.op) if red.target is not None else []
    return [*_INIT[red.family], *extra]


def accumulate_lines(red: Reduction, value: str) -> list[str]:
    transform = red.transform.format(v=value)
    lines = [line.format(t=transform) for line in _ACCUMULATE[red.family]]
    if red.target is not None:
        lines += target_accumulate(red.node.op, transform, red.ignore_index)
    return lines


def finalize_lines(red: Reduction, eps: str | None) -> list[str]:
    """The per-row values; norms add `row_rstd` (1 / sqrt(variance or mean square + eps))."""
    lines = ["n = n_red * 1.0", *_FINALIZE[red.family]]
    if red.target is not None:
        lines += target_finalize(red.node.op)
    if red.per_element and red.family == "moments":
        lines.append(f"row_rstd = 1.0 / tl.sqrt(row_m2 / n + {eps})")
    elif red.per_element and red.family == "sum":  # RMS norm: the mean of squares
        lines.append(f"row_rstd = 1.0 / tl.sqrt(row_sum / n + {eps})")
    return lines


def row_value(red: Reduction) -> str:
    """The [BLOCK_K] value of a row-valued reduction, from the finalized row values."""
    op = red.node.op
    if red.target is not None:
        return target_row_value(op, red.ignore_index)
    if op == "logsumexp":
        return "row_max + tl.log(row_sum)"
    if op in ("var", "std"):
        variance = f"row_m2 / (n - {render_literal(correction_of(red))})"
        return variance if op == "var" else f"tl.sqrt({variance})"
    if op == "mean":
        return "row_sum / n"
    if op == "norm" and red.transform == "{v} * {v}":
        return "tl.sqrt(row_sum)"
    named = {"sum": "row_sum", "max": "row_max", "min": "row_min", "prod": "row_prod"}
    return named[red.family]


def element_value(red: Reduction, value: str, weight: str | None, bias: str | None) -> str:
    """The per-element value of a norm or softmax at `value` (a [BLOCK_R, BLOCK_K] tile)."""
    op = red.node.op
    if op == "softmax":
        return f"tl.exp({value} - row_max[None, :]) / row_sum[None, :]"
    if op == "log_softmax":
        return f"{value} - row_max[None, :] - tl.log(row_sum)[None, :]"
    if red.family == "moments":
        expr = f"({value} - row_mean[None, :]) * row_rstd[None, :]"
    elif red.family == "sum":
        expr = f"{value} * row_rstd[None, :]"
    else:
        raise NotApplicable(f"no per-element value for {op}")
    if weight is not None:
        expr = f"{expr} * {weight}"
    if bias is not None:
        expr = f"{expr} + {bias}"
    return expr
