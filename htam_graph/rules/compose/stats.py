"""Kernel text of each accumulation family (see reducers.py): accumulators, their update, the per-row values.

Accumulators are [BLOCK_R, BLOCK_K] tiles updated elementwise inside the loop over the reduced index (masked
lanes leave them unchanged) and reduced over axis 0 once the loop ends, giving [BLOCK_K] partial values `p_*`
of the program's slice of each row. A row read whole by one program turns them into the row values directly;
a row split across programs (few long rows) stores them per slice, and a second phase merges every slice's
(`PARTIALS`, merged in slice order). The row values are `row_sum`, `row_max`, `row_min`, `row_prod`, or for
moments `row_mean` and `row_m2` (the sum of squared deviations), all in fp32. `n` is the row length as a
float.
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

__all__ = [
    "PARTIALS",
    "PROD_COMBINE",
    "accumulate_lines",
    "element_value",
    "finalize_lines",
    "init_lines",
    "merged_finalize_lines",
    "partial_store_lines",
    "row_value",
]

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

# This program's row values over its slice of the reduced index: the accumulator tiles reduced over axis 0.
# (lse: `p_max` is the slice's maximum, -inf for a slice without values; `p_sum` is relative to it, or to 0.)
_PARTS = {
    "sum": ["p_sum = tl.sum(acc, axis=0)"],
    "max": ["p_max = tl.max(acc, axis=0)"],
    "min": ["p_min = tl.min(acc, axis=0)"],
    "prod": ["p_prod = tl.reduce(acc, 0, _prod_combine)"],
    "lse": [
        "p_max = tl.max(run_max, axis=0)",
        f"p_max_safe = tl.where(p_max == {NEG_INF}, 0.0, p_max)  # no -inf - -inf",
        "p_sum = tl.sum(run_sum * tl.exp(run_max - p_max_safe[None, :]), axis=0)",
    ],
    "moments": ["p_dev = tl.sum(acc, axis=0)", "p_sq = tl.sum(acc_sq, axis=0)"],
}

# The partial values a split row stores per slice, with the value a masked load reads (the merge's identity).
PARTIALS: dict[str, tuple[tuple[str, str], ...]] = {
    "sum": (("sum", "0.0"),),
    "max": (("max", NEG_INF),),
    "min": (("min", POS_INF),),
    "prod": (("prod", "1.0"),),
    "lse": (("max", NEG_INF), ("sum", "0.0")),
    "moments": (("dev", "0.0"), ("sq", "0.0")),  # every slice's deviations are from the same shift
}

# p_* merged with the next slice's q_*.
_COMBINE = {
    "sum": ["p_sum = p_sum + q_sum"],
    "max": ["p_max = tl.maximum(p_max, q_max)"],
    "min": ["p_min = tl.minimum(p_min, q_min)"],
    "prod": ["p_prod = p_prod * q_prod"],
    "lse": [
        "m = tl.maximum(p_max, q_max)",
        f"m_safe = tl.where(m == {NEG_INF}, 0.0, m)",
        f"p_sum = p_sum * tl.exp(tl.where(p_max == {NEG_INF}, 0.0, p_max) - m_safe) + q_sum * tl.exp("
        f"tl.where(q_max == {NEG_INF}, 0.0, q_max) - m_safe)",
        "p_max = m",
    ],
    "moments": ["p_dev = p_dev + q_dev", "p_sq = p_sq + q_sq"],
}

# The row values from the whole row's p_* (one slice, or every slice merged).
_ROW_VALUES = {
    "sum": ["row_sum = p_sum"],
    "max": ["row_max = p_max"],
    "min": ["row_min = p_min"],
    "prod": ["row_prod = p_prod"],
    "lse": [f"row_max = tl.where(p_max == {NEG_INF}, 0.0, p_max)", "row_sum = p_sum"],
    "moments": [
        "dev_sum = p_dev",
        "row_mean = tl.sum(shift, axis=0) + dev_sum / n",
        "row_m2 = tl.maximum(p_sq - dev_sum * dev_sum / n, 0.0)",
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
    """The per-row values from this program's accumulators (the whole row); norms add `row_rstd`
    (1 / sqrt(variance or mean square + eps))."""
    lines = ["n = n_red * 1.0", *_PARTS[red.family], *_ROW_VALUES[red.family]]
    if red.target is not None:
        lines += target_finalize(red.node.op)
    return lines + _rstd(red, eps)


def partial_store_lines(red: Reduction) -> list[str]:
    """A split row's first phase: this slice's p_* values stored at [row, split] of each partial buffer."""
    stores = [
        f"tl.store(part_{name}_ptr + keep * n_split + split, p_{name}, mask=keep_mask)"
        for name, _ in PARTIALS[red.family]
    ]
    return [*_PARTS[red.family], *stores]


def merged_finalize_lines(red: Reduction, eps: str | None) -> list[str]:
    """A split row's second phase: every slice's p_* merged in slice order, then the per-row values."""
    parts = PARTIALS[red.family]
    first = [
        f"p_{name} = tl.load(part_{name}_ptr + keep * n_split, mask=keep_mask, other={identity})"
        for name, identity in parts
    ]
    loads = [
        f"    q_{name} = tl.load(part_{name}_ptr + keep * n_split + j, mask=keep_mask, other={identity})"
        for name, identity in parts
    ]
    merge = ["for j in range(1, n_split):", *loads, *(f"    {line}" for line in _COMBINE[red.family])]
    return ["n = n_red * 1.0", *first, *merge, *_ROW_VALUES[red.family], *_rstd(red, eps)]


def _rstd(red: Reduction, eps: str | None) -> list[str]:
    if red.per_element and red.family == "moments":
        return [f"row_rstd = 1.0 / tl.sqrt(row_m2 / n + {eps})"]
    if red.per_element and red.family == "sum":  # RMS norm: the mean of squares
        return [f"row_rstd = 1.0 / tl.sqrt(row_sum / n + {eps})"]
    return []


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
