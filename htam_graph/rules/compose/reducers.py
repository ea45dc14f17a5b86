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
from htam_graph.rules.compose.cross_entropy import CE_MEAN, CE_ROWS
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpKind, OpNode, Ref, Value, number

__all__ = ["Reduction", "describe_reduction", "REDUCING_KINDS", "TRAILING_NORMS"]

REDUCING_KINDS = (OpKind.REDUCTION, OpKind.TOTAL, OpKind.NORM, OpKind.SOFTMAX)
# norm modules (nn_*) and the functional norms (analysis/functional.py) that compute the same statistics
_GROUP_NORMS = ("nn_group_norm", "group_norm")
_INSTANCE_NORMS = ("nn_instance_norm", "instance_norm")
_RMS_NORMS = ("nn_rms_norm", "rms_norm")
_CHANNEL_NORMS = (*_GROUP_NORMS, *_INSTANCE_NORMS, "nn_batch_norm")
TRAILING_NORMS = ("nn_layer_norm", "layer_norm", *_RMS_NORMS)
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
    groups_from: str | None = None  # group norm: the model attribute whose group count is read at run time
    target: Ref | None = None  # cross-entropy's rows / mean: the class-index targets (cross_entropy.py)
    ignore_index: int = -100

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
    groups_from: str | None = None,
) -> Reduction:
    weight = node.operands[1] if node.kind is OpKind.NORM and len(node.operands) > 1 else Const(None)
    bias = node.operands[2] if node.kind is OpKind.NORM and len(node.operands) > 2 else Const(None)
    target, ignore_index = _target(node)
    return Reduction(
        node,
        family,
        transform,
        dims,
        _middle(dims),
        groups,
        keepdim,
        per_element,
        eps,
        weight,
        bias,
        groups_from,
        target,
        ignore_index,
    )


def _target(node: OpNode) -> tuple[Ref | None, int]:
    """Cross-entropy's targets and ignore_index (None, -100 for every other op)."""
    if node.op not in (CE_ROWS, CE_MEAN):
        return None, -100
    target, ignore = node.operands[1], number(node.param("ignore_index"))
    if not isinstance(target, Ref) or not isinstance(ignore, int):
        raise NotApplicable(f"{node.op} without a target tensor and an int ignore_index")
    return target, ignore


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
    if op in ("logsumexp", CE_ROWS):
        return "lse", "{v}"
    if op == CE_MEAN:
        return "sum", "{v}"
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
    if op in TRAILING_NORMS:
        normalized = node.param("normalized_shape")
        shape = normalized.value if isinstance(normalized, Const) else None
        shape = (shape,) if isinstance(shape, int) and not isinstance(shape, bool) else shape
        if not isinstance(shape, tuple) or not shape or len(shape) > rank:
            raise NotApplicable(f"{op} with normalized_shape={normalized}")
        dims = tuple(range(rank - len(shape), rank))
        if op in _RMS_NORMS:
            return _make(node, "sum", "{v} * {v}", dims, keepdim=True, per_element=True, eps=eps)
        return _make(node, "moments", "{v}", dims, keepdim=True, per_element=True, eps=eps)
    if op not in _CHANNEL_NORMS:
        raise NotApplicable(f"{op} is not a norm the composed kernels compute")
    if rank < 2:
        raise NotApplicable(f"{op} of an input without a channel dim")
    if op in _INSTANCE_NORMS:
        if op == "nn_instance_norm" and node.param("track_running_stats") != Const(False):
            raise NotApplicable("instance norm with running statistics")
        if rank < 3:
            raise NotApplicable("unbatched instance norm input")
        return _make(node, "moments", "{v}", tuple(range(2, rank)), keepdim=True, per_element=True, eps=eps)
    if op in _GROUP_NORMS:
        groups = node.param("num_groups")
        if not isinstance(groups, Const | AttrScalar) or not isinstance(groups.value, int):
            raise NotApplicable("group norm without a constant number of groups")
        # a model attribute (`F.group_norm(x, self.groups)`) may differ between the model's configurations
        source = groups.path if isinstance(groups, AttrScalar) else None
        dims = tuple(range(1, rank))
        return _make(
            node,
            "moments",
            "{v}",
            dims,
            keepdim=True,
            per_element=True,
            groups=groups.value,
            eps=eps,
            groups_from=source,
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
