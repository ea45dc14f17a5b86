"""The reducing op of a fused group, as a statistic the row kernel accumulates and the values it yields.

Every supported reduction or normalisation belongs to one accumulation family:

- `sum`: sum of a transform of the value (sum, mean, L1 / L2 / Frobenius norms, RMS norm's mean of squares);
- `max` / `min`: running maximum / minimum (amax, amin, the infinity norm);
- `prod`: running product;
- `lse`: online maximum and rescaled sum of exponentials (logsumexp, softmax, log_softmax);
- `moments`: sums of deviations from a per-row shift, and of their squares (var, std, layer / group / instance
  / batch norm). The shift is the row's first value, so the sums are of values near the mean and the variance
  `(S2 - S1^2 / n) / n` does not cancel for inputs with a large mean.

The row kernel (kernel_row.py) walks the reduced index in tiles of [BLOCK_R, BLOCK_K] (reduced x kept) and
keeps tile-shaped accumulators; `finalize_lines` reduces them over axis 0 to one value per kept row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpKind, OpNode, Ref, Value, number

__all__ = ["Reduction", "describe_reduction", "REDUCING_KINDS"]

REDUCING_KINDS = (OpKind.REDUCTION, OpKind.TOTAL, OpKind.NORM, OpKind.SOFTMAX)
_CHANNEL_NORMS = ("nn_group_norm", "nn_instance_norm", "nn_batch_norm")
_TRAILING_NORMS = ("nn_layer_norm", "layer_norm", "nn_rms_norm")
_SUM_TRANSFORMS = {"sum": "{v}", "mean": "{v}", "l1": "tl.abs({v})", "l2": "{v} * {v}"}


@dataclass(frozen=True)
class Reduction:
    """What the row kernel computes for the group's reducing op."""

    node: OpNode
    family: str  # sum | max | min | prod | lse | moments
    transform: str  # sum family: the accumulated expression of `{v}`; max/min: likewise
    dims: tuple[int, ...]  # reduced dims of the input, non-negative and sorted
    middle_reduced: bool  # True: rows are (outer, inner) around one block of reduced dims; False: the reverse
    groups: int  # group norm: rows are (sample, group); 1 otherwise
    keepdim: bool
    per_element: bool  # True: the op's value is per element (norms, softmax); False: one value per row
    eps: Value | None  # norms: the epsilon (None: RMS norm's dtype epsilon)
    weight: Value
    bias: Value

    @property
    def needs_shift(self) -> bool:
        return self.family == "moments"


def describe_reduction(graph: OpGraph, node: OpNode) -> Reduction:
    """The statistic of `node` (a REDUCTION / TOTAL / NORM / SOFTMAX node). Raises NotApplicable."""
    source = node.operands[0]
    if not isinstance(source, Ref):
        raise NotApplicable(f"{node.op} of a constant")
    rank = len(graph.shape_of(source.name))
    if rank == 0:
        raise NotApplicable(f"{node.op} of a 0-d tensor")
    if node.kind is OpKind.NORM:
        return _norm(node, rank)
    if node.kind is OpKind.SOFTMAX:
        dims = _dims(node.param("dim"), rank, node.op)
        return _make(node, "lse", "{v}", dims, keepdim=True, per_element=True)
    dims = _dims(node.param("dim"), rank, node.op) if node.kind is OpKind.REDUCTION else tuple(range(rank))
    keep = node.param("keepdim") if node.kind is OpKind.REDUCTION else Const(False)
    if not isinstance(keep, Const) or not isinstance(keep.value, bool):
        raise NotApplicable(f"{node.op} with keepdim={keep}")
    family, transform = _reduction_family(node)
    return _make(node, family, transform, dims, keepdim=keep.value, per_element=False)


def _make(
    node: OpNode,
    family: str,
    transform: str,
    dims: tuple[int, ...],
    *,
    keepdim: bool,
    per_element: bool,
    groups: int = 1,
    eps: Value | None = None,
) -> Reduction:
    weight = node.operands[1] if node.kind is OpKind.NORM and len(node.operands) > 1 else Const(None)
    bias = node.operands[2] if node.kind is OpKind.NORM and len(node.operands) > 2 else Const(None)
    return Reduction(
        node, family, transform, dims, _middle(dims), groups, keepdim, per_element, eps, weight, bias
    )


def _reduction_family(node: OpNode) -> tuple[str, str]:
    op = node.op
    if op in ("sum", "mean"):
        return "sum", "{v}"
    if op == "amax":
        return "max", "{v}"
    if op == "amin":
        return "min", "{v}"
    if op == "prod":
        return "prod", "{v}"
    if op == "logsumexp":
        return "lse", "{v}"
    if op in ("var", "std"):
        _correction(node)
        return "moments", "{v}"
    if op == "norm":
        kind = _norm_kind(node.param("p"))
        if kind == "inf":
            return "max", "tl.abs({v})"
        return "sum", _SUM_TRANSFORMS[kind]
    raise NotApplicable(f"{op} is not a reduction the composed kernels compute")


def _norm_kind(p: Value) -> str:
    if isinstance(p, Const) and p.value == "fro":
        return "l2"
    value = number(p) if isinstance(p, Const) else None
    if value == 2:
        return "l2"
    if value == 1:
        return "l1"
    if value is not None and math.isinf(value) and value > 0:
        return "inf"
    raise NotApplicable(f"norm with p={p} (only fro, 1, 2 and inf)")


def _correction(node: OpNode) -> float:
    """The variance's divisor offset: n - correction (unbiased=True: 1)."""
    correction = node.param("correction")
    if isinstance(correction, Const) and correction.value is None:
        unbiased = node.param("unbiased")
        if not isinstance(unbiased, Const) or not isinstance(unbiased.value, bool):
            raise NotApplicable(f"{node.op} with unbiased={unbiased}")
        return 1.0 if unbiased.value else 0.0
    value = number(correction) if isinstance(correction, Const) else None
    if value is None:
        raise NotApplicable(f"{node.op} with correction={correction}")
    return float(value)


def correction_of(red: Reduction) -> float:
    return _correction(red.node)


def _norm(node: OpNode, rank: int) -> Reduction:
    op = node.op
    eps = node.param("eps")
    if op in _TRAILING_NORMS:
        normalized = node.param("normalized_shape")
        shape = normalized.value if isinstance(normalized, Const) else None
        shape = (shape,) if isinstance(shape, int) and not isinstance(shape, bool) else shape
        if not isinstance(shape, tuple) or not shape or len(shape) > rank:
            raise NotApplicable(f"{op} with normalized_shape={normalized}")
        dims = tuple(range(rank - len(shape), rank))
        if op == "nn_rms_norm":
            return _make(node, "sum", "{v} * {v}", dims, keepdim=True, per_element=True, eps=eps)
        return _make(node, "moments", "{v}", dims, keepdim=True, per_element=True, eps=eps)
    if op not in _CHANNEL_NORMS:
        raise NotApplicable(f"{op} is not a norm the composed kernels compute")
    if rank < 2:
        raise NotApplicable(f"{op} of an input without a channel dim")
    if op == "nn_instance_norm":
        if node.param("track_running_stats") != Const(False):
            raise NotApplicable("instance norm with running statistics")
        if rank < 3:
            raise NotApplicable("unbatched instance norm input")
        return _make(node, "moments", "{v}", tuple(range(2, rank)), keepdim=True, per_element=True, eps=eps)
    if op == "nn_group_norm":
        groups = node.param("num_groups")
        if not isinstance(groups, Const) or not isinstance(groups.value, int):
            raise NotApplicable("group norm without a constant number of groups")
        dims = tuple(range(1, rank))
        return _make(
            node, "moments", "{v}", dims, keepdim=True, per_element=True, groups=groups.value, eps=eps
        )
    momentum = node.param("momentum")
    if number(momentum) is None and node.param("track_running_stats") == Const(True):
        raise NotApplicable("batch norm with momentum=None (cumulative average)")
    dims = (0, *range(2, rank))
    return _make(node, "moments", "{v}", dims, keepdim=True, per_element=True, eps=eps)


def _dims(dim: Value, rank: int, op: str) -> tuple[int, ...]:
    if isinstance(dim, Const) and dim.value in (None, ()):
        return tuple(range(rank))
    value = dim.value if isinstance(dim, Const | AttrScalar) else None
    raw = (value,) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(raw, tuple) or not all(isinstance(d, int) and not isinstance(d, bool) for d in raw):
        raise NotApplicable(f"{op} over dim={dim}")
    dims = sorted({d % rank for d in raw if -rank <= d < rank})
    if len(dims) != len(raw):
        raise NotApplicable(f"{op} over dims {raw} of a rank-{rank} tensor")
    if not _middle(tuple(dims)) and not _kept_block(tuple(dims), rank):
        raise NotApplicable(f"{op} over dims {raw}: neither the reduced nor the kept dims are adjacent")
    return tuple(dims)


def _middle(dims: tuple[int, ...]) -> bool:
    """Whether the reduced dims are one adjacent block (else the kept dims are)."""
    return bool(dims) and list(dims) == list(range(dims[0], dims[-1] + 1))


def _kept_block(dims: tuple[int, ...], rank: int) -> bool:
    kept = [d for d in range(rank) if d not in dims]
    return bool(kept) and kept == list(range(kept[0], kept[-1] + 1))
