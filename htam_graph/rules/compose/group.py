"""A fused group: consecutive fusable ops of the op graph that become one Triton kernel.

A group holds elementwise ops and at most one reducing op (a reduction over dims, a norm module, a softmax).
Each of its ops is evaluated in one of two index spaces:

- FULL: one value per element of the reducing op's input (or of the group's output when nothing reduces);
- REDUCED: one value per kept row of the reduction (the reduction's result and the ops applied to it).

A FULL op may read a REDUCED value (x - x.mean(dim, keepdim=True), softmax(x) * s): the row's value is
broadcast over the row. Every tensor the group reads from outside (forward inputs, parameters, an earlier
stage's output) is a Leaf of one space, read at its space's flat index with a block broadcast
(fused_elementwise.broadcast_layout), so a per-channel bias, a per-feature scale or a 0-d tensor all work.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.codegen.fused_elementwise import identifier
from htam_graph.rules.compose.reducers import REDUCING_KINDS, TRAILING_NORMS, Reduction, describe_reduction
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpKind, OpNode, Ref, Value

__all__ = ["DTYPE_EPS", "GROUP_COUNT", "Group", "Leaf", "Scalar", "Space", "build_group", "values_of"]

FLOAT_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")
DTYPE_EPS = "<dtype eps>"  # the Scalar key of RMS norm's default epsilon (torch.finfo(dtype).eps)
GROUP_COUNT = "<num_groups>"  # the Scalar key of a group norm's group count read from a model attribute


class Space(StrEnum):
    FULL = "full"
    REDUCED = "reduced"


@dataclass(frozen=True)
class Leaf:
    """A tensor the kernel loads: `ref` in the graph, `arg` in the kernel, `expr` in ModelNew.forward."""

    ref: str
    arg: str
    expr: str
    space: Space
    shape: tuple[int, ...]  # as analysed (a per-channel norm parameter viewed as (C, 1, ..., 1))
    broadcast: bool  # False: the leaf has its space's full shape and is read at the flat index
    index: bool = False  # True: cross-entropy's int64 targets, loaded as they are by the reduction's lines
    # broadcast in two blocks of dims (x[:, None, :] against [B, C, F]): read with two (inner, size) pairs
    two_blocks: bool = False
    # broadcast in more blocks: the launcher expands it to its space's shape first
    expand: bool = False


@dataclass(frozen=True)
class Scalar:
    """A number read from a module attribute at run time (`expr`), passed to the kernel as `arg`.

    A launcher-only scalar (`in_kernel` False: a group norm's group count, which sets the row layout) is an
    int argument of the launcher and never reaches the kernel."""

    key: str
    arg: str
    expr: str
    in_kernel: bool = True


@dataclass(frozen=True)
class Group:
    """One kernel's worth of ops; see the module docstring."""

    name: str
    nodes: tuple[OpNode, ...]
    spaces: tuple[tuple[str, Space], ...]  # node name -> space
    reduction: Reduction | None
    leaves: tuple[Leaf, ...]
    scalars: tuple[Scalar, ...]
    output: str
    out_space: Space
    out_dtype: str
    full_shape: tuple[int, ...]

    def space_of(self, name: str) -> Space:
        return dict(self.spaces)[name]

    def leaf(self, ref: str, space: Space) -> Leaf:
        return next(leaf for leaf in self.leaves if leaf.ref == ref and leaf.space == space)

    def describe(self) -> str:
        ops = [n.op.removeprefix("nn_") for n in self.nodes]
        return " -> ".join(ops[:8]) + (f" -> ... ({len(ops)} ops)" if len(ops) > 8 else "")


def values_of(node: OpNode) -> tuple[Value, ...]:
    return (*node.operands, *(v for _, v in node.params))


def build_group(graph: OpGraph, nodes: tuple[OpNode, ...], name: str, leaf_exprs: dict[str, str]) -> Group:
    """Check that `nodes` form one kernel (see the module docstring) and describe it. Raises NotApplicable.

    `leaf_exprs`: the forward expression of every tensor the group may read from outside."""
    if not nodes:
        raise NotApplicable("an empty group")
    for node in nodes:
        if node.kind is not OpKind.ELEMENTWISE and node.kind not in REDUCING_KINDS:
            raise NotApplicable(f"{node.op} ({node.origin}) is neither elementwise nor a reduction")
    reducers = [n for n in nodes if n.kind in REDUCING_KINDS]
    if len(reducers) > 1:
        raise NotApplicable("more than one reduction in one kernel")
    reduction = describe_reduction(graph, reducers[0]) if reducers else None
    out = nodes[-1]
    if out.dtype not in FLOAT_DTYPES:
        raise NotApplicable(f"the output {out.name} has dtype {out.dtype}; only float outputs are written")
    if reduction is None:
        spaces = {n.name: Space.FULL for n in nodes}
        full_shape = out.shape
    else:
        full_shape = graph.shape_of(reduction.node.operands[0].name)  # type: ignore[union-attr]
        spaces = _spaces(nodes, reduction, full_shape)
    _check_shapes(nodes, spaces, reduction, full_shape)
    leaves, scalars = _leaves(graph, nodes, spaces, reduction, leaf_exprs, full_shape)
    return Group(
        name,
        nodes,
        tuple(spaces.items()),
        reduction,
        leaves,
        scalars,
        out.name,
        spaces[out.name],
        out.dtype,
        full_shape,
    )


def reduced_shape(reduction: Reduction, full_shape: tuple[int, ...]) -> tuple[int, ...]:
    if reduction.per_element:
        return full_shape
    if reduction.keepdim:
        return tuple(1 if d in reduction.dims else s for d, s in enumerate(full_shape))
    return tuple(s for d, s in enumerate(full_shape) if d not in reduction.dims)


def _spaces(nodes: tuple[OpNode, ...], reduction: Reduction, full_shape: tuple[int, ...]) -> dict[str, Space]:
    """Dependants of a row-valued reduction are REDUCED while they keep the reduced shape; every other op is
    FULL, except ops that depend on nothing reduced and feed only REDUCED ops (a scale of the reduced sum)."""
    red = reduction.node
    row_valued = not reduction.per_element
    small = reduced_shape(reduction, full_shape)
    dependent = {red.name}
    spaces: dict[str, Space] = {red.name: Space.REDUCED if row_valued else Space.FULL}
    for node in nodes:
        if node is red:
            continue
        if any(isinstance(v, Ref) and v.name in dependent for v in values_of(node)):
            dependent.add(node.name)
            keeps_rows = row_valued and node.shape == small and small != full_shape
            spaces[node.name] = Space.REDUCED if keeps_rows else Space.FULL
    for node in reversed(nodes):
        if node.name in dependent:
            continue
        users = [u for u in nodes if any(isinstance(v, Ref) and v.name == node.name for v in values_of(u))]
        reduced_users = [u for u in users if spaces.get(u.name) is Space.REDUCED and u is not red]
        spaces[node.name] = Space.REDUCED if users and len(reduced_users) == len(users) else Space.FULL
    return {n.name: spaces[n.name] for n in nodes}


def _check_shapes(
    nodes: tuple[OpNode, ...],
    spaces: dict[str, Space],
    reduction: Reduction | None,
    full_shape: tuple[int, ...],
) -> None:
    small = reduced_shape(reduction, full_shape) if reduction is not None else full_shape
    broadcasts_back = reduction is None or reduction.keepdim or len(small) == 0
    for node in nodes:
        space = spaces[node.name]
        target = small if space is Space.REDUCED else full_shape
        if reduction is not None and node is reduction.node:
            continue
        if not _broadcasts(node.shape, target):
            raise NotApplicable(f"{node.op} has shape {list(node.shape)}, not within {list(target)}")
        for value in values_of(node):
            if not isinstance(value, Ref) or value.name not in spaces:
                continue
            if spaces[value.name] is Space.FULL and space is Space.REDUCED:
                raise NotApplicable(f"{node.op} reads a per-element value in a per-row context")
            if spaces[value.name] is Space.REDUCED and space is Space.FULL and not broadcasts_back:
                raise NotApplicable("a reduction without keepdim is broadcast back over its input")
    out = nodes[-1]
    target = small if spaces[out.name] is Space.REDUCED else full_shape
    if out.shape != target:
        raise NotApplicable(f"the kernel's output {list(out.shape)} is not its space's shape {list(target)}")


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    if len(shape) > len(target):
        return False
    padded = (1,) * (len(target) - len(shape)) + shape
    return all(s in (1, t) for s, t in zip(padded, target, strict=True))


def _leaves(
    graph: OpGraph,
    nodes: tuple[OpNode, ...],
    spaces: dict[str, Space],
    reduction: Reduction | None,
    leaf_exprs: dict[str, str],
    full_shape: tuple[int, ...],
) -> tuple[tuple[Leaf, ...], tuple[Scalar, ...]]:
    taken: set[str] = set()
    leaves: dict[tuple[str, Space], Leaf] = {}
    scalars: dict[str, Scalar] = {}
    small = reduced_shape(reduction, full_shape) if reduction is not None else full_shape
    for node in nodes:
        reads = values_of(node)
        if reduction is not None and node is reduction.node:
            reads = (node.operands[0], *([reduction.eps] if reduction.eps is not None else []))
        space = Space.FULL if (reduction is not None and node is reduction.node) else spaces[node.name]
        for value in reads:
            if isinstance(value, AttrScalar) and value.path not in scalars:
                scalars[value.path] = Scalar(
                    value.path, identifier(value.path, taken), f"float(self.{value.path})"
                )
            if isinstance(value, Ref) and _is_int(graph, value.name) and value.name not in scalars:
                if value.name not in leaf_exprs:
                    raise NotApplicable(f"the size {value.name} is not computed before the kernel")
                expr = f"float({leaf_exprs[value.name]})"  # a size read in the forward: a number
                scalars[value.name] = Scalar(value.name, identifier(value.name, taken), expr)
            if not isinstance(value, Ref) or value.name in spaces or value.name in scalars:
                continue
            if (value.name, space) in leaves:
                continue
            if value.name not in leaf_exprs:
                raise NotApplicable(f"{value.name} is computed outside the fusable ops")
            target = small if space is Space.REDUCED else full_shape
            shape = _float_shape(graph, value.name)
            leaves[(value.name, space)] = _leaf(
                value.name, leaf_exprs[value.name], space, shape, target, taken
            )
    if reduction is not None and reduction.eps == Const(None):
        dtype = _float_dtype(graph, reduction.node.operands[0].name)  # type: ignore[union-attr]
        scalars[DTYPE_EPS] = Scalar(DTYPE_EPS, identifier("eps", taken), f"torch.finfo({dtype}).eps")
    if reduction is not None and reduction.groups_from is not None:
        path = reduction.groups_from
        scalars[GROUP_COUNT] = Scalar(GROUP_COUNT, identifier(path, taken), f"int(self.{path})", False)
    if reduction is not None:
        for value in (reduction.weight, reduction.bias):
            if isinstance(value, Ref):
                shape, expr = _affine(graph, reduction, value.name, leaf_exprs, len(full_shape))
                leaves[(value.name, Space.FULL)] = _leaf(
                    value.name, expr, Space.FULL, shape, full_shape, taken
                )
            elif value != Const(None):
                raise NotApplicable(f"{reduction.node.op} with a non-tensor affine parameter {value}")
    if reduction is not None and reduction.target is not None:
        leaf = _target_leaf(graph, reduction.target.name, leaf_exprs, full_shape, small, taken)
        if (leaf.ref, leaf.space) in leaves:
            raise NotApplicable(f"the targets {leaf.ref} are also read as values")
        leaves[(leaf.ref, leaf.space)] = leaf
    full_leaves = [leaf.shape for leaf in leaves.values() if leaf.space is Space.FULL]
    if _broadcast_all(full_leaves, len(full_shape)) != full_shape:
        raise NotApplicable(
            "the operands do not give the kernel's full shape (pure broadcasting is not fused)"
        )
    return tuple(leaves.values()), tuple(scalars.values())


def _broadcast_all(shapes: list[tuple[int, ...]], rank: int) -> tuple[int, ...]:
    """The broadcast shape of `shapes` (each already checked to broadcast onto a rank-`rank` shape)."""
    out = [1] * rank
    for shape in shapes:
        padded = (1,) * (rank - len(shape)) + shape
        out = [max(a, b) for a, b in zip(out, padded, strict=True)]
    return tuple(out)


def _leaf(
    ref: str, expr: str, space: Space, shape: tuple[int, ...], target: tuple[int, ...], taken: set[str]
) -> Leaf:
    if not _broadcasts(shape, target):
        raise NotApplicable(f"operand {ref}{list(shape)} does not broadcast onto {list(target)}")
    padded = (1,) * (len(target) - len(shape)) + shape
    blocks = broadcast_blocks(padded, target)
    suffix = "_r" if space is Space.REDUCED else ""
    arg = identifier(ref + suffix, taken)
    broadcast = shape != target and blocks <= 2
    return Leaf(ref, arg, expr, space, shape, broadcast, two_blocks=blocks == 2, expand=blocks > 2)


def broadcast_blocks(padded: tuple[int, ...], target: tuple[int, ...]) -> int:
    """How many runs of the operand's non-1 dims are separated by a dim it broadcasts over."""
    dims = [d for d, s in enumerate(padded) if s != 1]
    gaps = sum(
        1 for a, b in zip(dims, dims[1:], strict=False) if any(target[d] != 1 for d in range(a + 1, b))
    )
    return len(dims) and 1 + gaps


def _is_int(graph: OpGraph, name: str) -> bool:
    node = graph.node(name)
    return node is not None and node.dtype == "int"


def _target_leaf(
    graph: OpGraph,
    name: str,
    leaf_exprs: dict[str, str],
    full_shape: tuple[int, ...],
    small: tuple[int, ...],
    taken: set[str],
) -> Leaf:
    """Cross-entropy's targets: one per row of the loss (REDUCED) or per element of the rows' mean (FULL)."""
    if name not in leaf_exprs:
        raise NotApplicable(f"the targets {name} are computed in the forward")
    info = graph.tensor(name)
    if info is None or info.dtype != "torch.int64":
        raise NotApplicable(f"the targets {name} are not an int64 tensor")
    space = Space.FULL if info.shape == full_shape else Space.REDUCED
    if info.shape != (full_shape if space is Space.FULL else small):
        raise NotApplicable(f"the targets {name}{list(info.shape)} are not one per row")
    return Leaf(name, identifier(name, taken), leaf_exprs[name], space, info.shape, False, True)


def _float_shape(graph: OpGraph, name: str) -> tuple[int, ...]:
    _float_dtype(graph, name)
    return graph.shape_of(name)


def _float_dtype(graph: OpGraph, name: str) -> str:
    info = graph.tensor(name)
    node = graph.node(name)
    dtype = info.dtype if info is not None else (node.dtype if node is not None else "")
    if dtype not in FLOAT_DTYPES:
        raise NotApplicable(f"operand {name} has dtype {dtype}; only float tensors are fused")
    return dtype


def _affine(
    graph: OpGraph, reduction: Reduction, name: str, leaf_exprs: dict[str, str], rank: int
) -> tuple[tuple[int, ...], str]:
    """A norm's weight / bias as read per element: trailing norms' parameters align with the trailing dims;
    group / instance / batch norms' are per channel (dim 1), viewed as (C, 1, ..., 1)."""
    if name not in leaf_exprs:
        raise NotApplicable(f"{reduction.node.op}'s affine operand {name} is computed in the forward")
    shape = _float_shape(graph, name)
    if reduction.node.op in TRAILING_NORMS or rank <= 2:
        return shape, leaf_exprs[name]
    if len(shape) != 1:
        raise NotApplicable(f"{reduction.node.op}'s affine operand {name} is not a vector")
    spatial = rank - 2
    return (shape[0],) + (1,) * spatial, f"{leaf_exprs[name]}.view(-1{', 1' * spatial})"


def layout_args(leaf: Leaf) -> list[str]:
    """The broadcast layout arguments of a leaf, in the launch and the kernel's parameters alike."""
    if not leaf.broadcast:
        return []
    pairs = [f"{leaf.arg}_inner", f"{leaf.arg}_size"]
    return [*pairs, f"{leaf.arg}_inner2", f"{leaf.arg}_size2"] if leaf.two_blocks else pairs
