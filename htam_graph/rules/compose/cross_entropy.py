"""Cross-entropy with class-index targets as two composed reductions, and the kernel lines they add.

`cross_entropy(x, t)` (a LOSS node: `F.cross_entropy` or `nn.CrossEntropyLoss`; the analysis accepted it only
without class weights or label smoothing, and with ignore_index -100) is rewritten, for the composed plan
only, into:

1. `cross_entropy_rows(x, t)`: a reduction of x over its class dim 1 (family `lse`, rows = every index but
   the class). Besides the online logsumexp the loop picks the target's logit: `picked` accumulates the
   value where the class index equals the row's target. The row's value is `logsumexp - picked`, and 0 where
   the target is ignore_index (what PyTorch gives such rows with reduction='none').
2. `reduction='mean'`: `cross_entropy_mean(rows, t)`, a sum over every row divided by the number of rows
   whose target is not ignore_index (PyTorch's mean; all ignored gives 0 / 0 = nan, as PyTorch does);
   `reduction='sum'`: a plain `sum` of the rows; `reduction='none'`: the rows are the result.

The elementwise ops before the loss stay in the first group (recomputed from the inputs inside the loop) and
the ops after it in the second, as for any composed reduction. Targets are int64 tensors read as they are
(never converted to float). A target outside [0, C) that is not ignore_index (PyTorch raises) matches no
class: its row's loss is the logsumexp alone.
"""

from __future__ import annotations

import dataclasses

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import Const, OpGraph, OpKind, OpNode, Ref

__all__ = [
    "CE_MEAN",
    "CE_ROWS",
    "TARGET",
    "expand_cross_entropy",
    "target_accumulate",
    "target_finalize",
    "target_init",
    "target_load",
    "target_row_value",
]

CE_ROWS = "cross_entropy_rows"
CE_MEAN = "cross_entropy_mean"
TARGET = "ce_target"  # the kernel variable holding the loaded targets
_INDEX_DTYPE = "torch.int64"


def expand_cross_entropy(graph: OpGraph) -> OpGraph:
    """`graph` with every cross_entropy node replaced by its reductions (see the module docstring)."""
    nodes: list[OpNode] = []
    for node in graph.nodes:
        if node.kind is OpKind.LOSS and node.op == "cross_entropy":
            nodes += _expanded(graph, node)
        else:
            nodes.append(node)
    return dataclasses.replace(graph, nodes=tuple(nodes))


def _expanded(graph: OpGraph, node: OpNode) -> list[OpNode]:
    source, target = node.operands
    if not isinstance(source, Ref) or not isinstance(target, Ref):
        raise NotApplicable("cross_entropy of a constant")
    shape = graph.shape_of(source.name)
    target_shape = graph.shape_of(target.name)
    if len(shape) < 2:
        raise NotApplicable("cross_entropy of an unbatched input (no class dim 1)")
    if target_shape != shape[:1] + shape[2:]:
        raise NotApplicable(
            f"cross_entropy target {list(target_shape)} is not class indices for input {list(shape)}"
        )
    if _dtype(graph, target.name) != _INDEX_DTYPE:
        raise NotApplicable(
            f"cross_entropy target of dtype {_dtype(graph, target.name)} (class indices: int64)"
        )
    reduction = node.param("reduction")
    ignore = ("ignore_index", node.param("ignore_index"))
    keep = (("dim", Const(1)), ("keepdim", Const(False)), ignore)
    rows_name = node.name if reduction == Const("none") else f"{node.name}_rows"
    origin = f"{node.origin}: per-row loss"
    rows = OpNode(
        rows_name, OpKind.REDUCTION, CE_ROWS, (source, target), keep, target_shape, node.dtype, None, origin
    )
    if reduction == Const("none"):
        return [rows]
    total = (("dim", Const(None)), ("keepdim", Const(False)))
    if reduction == Const("sum"):
        return [rows, OpNode(node.name, OpKind.TOTAL, "sum", (Ref(rows_name),), total, (), node.dtype)]
    if reduction != Const("mean"):
        raise NotApplicable(f"cross_entropy with reduction={reduction}")
    mean = OpNode(
        node.name, OpKind.TOTAL, CE_MEAN, (Ref(rows_name), target), (*total, ignore), (), node.dtype
    )
    return [rows, dataclasses.replace(mean, origin=f"{node.origin}: mean over targets not ignored")]


def _dtype(graph: OpGraph, name: str) -> str:
    info, node = graph.tensor(name), graph.node(name)
    return info.dtype if info is not None else (node.dtype if node is not None else "")


def target_load(arg: str, ignore_index: int, offs: str, mask: str) -> str:
    """Load the targets (leaf `arg`) at `offs`; masked lanes read ignore_index."""
    return f"{TARGET} = tl.load({arg}_ptr + {offs}, mask={mask}, other={ignore_index})"


def target_init(op: str) -> list[str]:
    if op == CE_ROWS:
        return ["picked = tl.zeros([BLOCK_R, BLOCK_K], dtype=tl.float32)  # the target's logit, once per row"]
    return ["count = tl.zeros([BLOCK_R, BLOCK_K], dtype=tl.float32)  # rows whose target is not ignored"]


def target_accumulate(op: str, value: str, ignore_index: int) -> list[str]:
    """Inside the loop: `red` is the class index (the reduced dim 1) of the tile's values `value`."""
    if op == CE_ROWS:
        return [f"picked += tl.where(mask & (red[:, None] == {TARGET}[None, :]), {value}, 0.0)"]
    return [f"count += tl.where(mask & ({TARGET} != {ignore_index}), 1.0, 0.0)"]


def target_finalize(op: str) -> list[str]:
    if op == CE_ROWS:
        return ["row_picked = tl.sum(picked, axis=0)"]
    return ["row_count = tl.sum(count, axis=0)"]


def target_row_value(op: str, ignore_index: int) -> str:
    if op == CE_ROWS:
        return f"tl.where({TARGET} == {ignore_index}, 0.0, row_max + tl.log(row_sum) - row_picked)"
    return "row_sum / row_count"
