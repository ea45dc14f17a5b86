"""The plan of `fusion.pointwise_into_reduction`: an elementwise expression reduced over EVERY element.

A forward qualifies when it is elementwise ops on its inputs (with broadcasting) ending in one full reduction:
`torch.mean(expr)` / `torch.sum(expr)` / `expr.mean()` (no dim), or a functional loss with reduction mean /
sum / batchmean (`F.mse_loss`, `F.l1_loss`, `F.smooth_l1_loss`, `F.huber_loss`, `F.kl_div`), which returns a
0-d tensor. The full (broadcast) shape is viewed as [rows, cols] = [prod(shape[:split]), prod(shape[split:])]
with `split` chosen so that every operand is one of: full (read at row * cols + col), a column operand
(broadcast over the leading dims: read at col), a row operand (broadcast over the trailing dims: read at row)
or a single element. No operand index needs a division per element, so the kernel stays memory-bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.codegen.fused_elementwise import identifier
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpKind, OpNode, Ref

__all__ = ["LossLeaf", "LossPlan", "LossScalar", "plan_loss", "FULL", "COL", "ROW", "ONE"]

_FLOAT_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")
FULL, COL, ROW, ONE = "full", "col", "row", "one"
_KERNEL_NAMES = (
    "rows cols acc term tile n_rows n_cols n_tiles n_programs n_col_tiles partials full block_r block_c "
    "n_partials math"
).split()
_LOSS_OPS = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div")


@dataclass(frozen=True)
class LossLeaf:
    """A tensor the kernel reads: `space` says how its index follows from (row, col)."""

    ref: str
    arg: str  # identifier in the launcher and the kernel
    space: str  # FULL | COL | ROW | ONE


@dataclass(frozen=True)
class LossScalar:
    """A number read from a module attribute at run time (e.g. `self.beta`)."""

    path: str
    arg: str


@dataclass(frozen=True)
class LossPlan:
    """What the two kernels compute."""

    leaves: tuple[LossLeaf, ...]
    scalars: tuple[LossScalar, ...]
    pre: tuple[OpNode, ...]  # elementwise nodes, in order, feeding the final reduction
    final: OpNode  # the TOTAL (sum / mean) or LOSS node: the forward's output
    split: int  # the [rows, cols] view splits the full shape before this dim
    full_rank: int
    divisor: str  # "one" | "numel" | "rows0" (batchmean: the size of dim 0)

    def describe(self) -> str:
        ops = [n.op for n in (*self.pre, self.final)]
        return " -> ".join(ops[:8]) + (f" -> ... ({len(ops)} ops)" if len(ops) > 8 else "")


def plan_loss(graph: OpGraph) -> LossPlan:
    """The plan for `graph`, or NotApplicable with the reason."""
    if not graph.nodes:
        raise NotApplicable("the forward computes nothing")
    final = graph.nodes[-1]
    if graph.output.name != final.name:
        raise NotApplicable("the forward's output is not its last op")
    if final.kind not in (OpKind.TOTAL, OpKind.LOSS):
        raise NotApplicable(
            f"the forward does not end in a sum/mean over every element or a loss ({final.op} "
            f"is {final.kind})"
        )
    if final.dtype not in _FLOAT_DTYPES:
        raise NotApplicable(f"the result dtype {final.dtype} is not a float")
    pre = graph.nodes[:-1]
    for node in pre:
        if node.kind is not OpKind.ELEMENTWISE:
            raise NotApplicable(f"{node.op} ({node.origin}) before the reduction is not elementwise")
    full_shape = _full_shape(graph, final)
    if not full_shape:
        raise NotApplicable(f"{final.op} of a 0-d tensor (nothing to reduce)")
    names = _leaf_names(graph, pre, final)
    dtypes = {name: _dtype(graph, name) for name in names}
    for name, dtype in dtypes.items():
        if dtype not in _FLOAT_DTYPES:
            raise NotApplicable(f"operand {name} has dtype {dtype}; only float tensors are reduced")
    if len(set(dtypes.values())) > 1:
        raise NotApplicable("operands of different float dtypes (type promotion is not reproduced)")
    shapes = [graph.shape_of(n) for n in names]
    split = _choose_split(full_shape, shapes, names)
    taken: set[str] = set(_KERNEL_NAMES)  # operands never shadow the kernel's own variables
    leaves = tuple(
        LossLeaf(n, identifier(n, taken), _space(full_shape, s, split) or FULL)  # _choose_split checked all
        for n, s in zip(names, shapes, strict=True)
    )
    scalars: dict[str, LossScalar] = {}
    for node in (*pre, final):
        for value in (*node.operands, *(v for _, v in node.params)):
            if isinstance(value, AttrScalar) and value.path not in scalars:
                scalars[value.path] = LossScalar(value.path, identifier(value.path, taken))
    return LossPlan(leaves, tuple(scalars.values()), pre, final, split, len(full_shape), _divisor(final))


def _dtype(graph: OpGraph, name: str) -> str:
    info = graph.tensor(name)
    return info.dtype if info is not None else ""


def _full_shape(graph: OpGraph, final: OpNode) -> tuple[int, ...]:
    operands = [v for v in final.operands if isinstance(v, Ref)]
    if len(operands) != len(final.operands):
        raise NotApplicable(f"{final.op} reads a constant")
    shapes = {graph.shape_of(v.name) for v in operands}
    if len(shapes) != 1:
        raise NotApplicable(f"{final.op} of operands with different shapes (a broadcasting loss)")
    return shapes.pop()


def _leaf_names(graph: OpGraph, pre: tuple[OpNode, ...], final: OpNode) -> list[str]:
    names: list[str] = []
    inside = {n.name for n in pre}
    for node in (*pre, final):
        for value in (*node.operands, *(v for _, v in node.params)):
            if not isinstance(value, Ref) or value.name in inside or value.name in names:
                continue
            if graph.tensor(value.name) is None:
                raise NotApplicable(f"{value.name} is computed by an op outside the fused expression")
            names.append(value.name)
        if node is not final and not graph.users(node.name):
            raise NotApplicable(f"{node.op} ({node.name}) does not feed the reduction")
    if not names:
        raise NotApplicable("the reduced expression reads no tensor")
    return names


def _space(full: tuple[int, ...], shape: tuple[int, ...], split: int) -> str | None:
    (
        """How an operand of `shape` is indexed in the [rows, """
        """cols] view of `full` split at `split` (None: not)."""
    )
    if len(shape) > len(full):
        return None
    padded = (1,) * (len(full) - len(shape)) + tuple(shape)
    head_full, tail_full = padded[:split] == full[:split], padded[split:] == full[split:]
    head_one, tail_one = all(s == 1 for s in padded[:split]), all(s == 1 for s in padded[split:])
    if head_full and tail_full:
        return FULL
    if head_one and tail_one:
        return ONE
    if head_one and tail_full:
        return COL
    if head_full and tail_one:
        return ROW
    return None


def _choose_split(full: tuple[int, ...], shapes: list[tuple[int, ...]], names: list[str]) -> int:
    """The split that makes every operand full / row / column / one; 0 (a flat view) when all are full."""
    if all(tuple(s) == full for s in shapes):
        return 0
    for split in range(len(full), -1, -1):
        if all(_space(full, s, split) is not None for s in shapes):
            return split
    bad = [f"{n}{list(s)}" for n, s in zip(names, shapes, strict=True) if math.prod(s) != math.prod(full)]
    raise NotApplicable(
        f"operands {', '.join(bad)} do not broadcast onto {list(full)} as rows, columns or one element"
    )


def _divisor(final: OpNode) -> str:
    if final.kind is OpKind.TOTAL:
        return "numel" if final.op == "mean" else "one"
    if final.op not in _LOSS_OPS:
        raise NotApplicable(f"no pointwise rule for the loss {final.op}")
    reduction = final.param("reduction")
    value = reduction.value if isinstance(reduction, Const) else None
    if value == "none":
        raise NotApplicable(f"{final.op} with reduction='none' is elementwise, not a reduction")
    return {"mean": "numel", "sum": "one", "batchmean": "rows0"}[str(value)]
