"""The plan shared by the reduction and normalisation recipes: one reducing op with fused neighbours.

A forward qualifies when it is: an optional library op (conv / linear / matmul, kept as the library call,
possibly after pooling modules on the input, kept as PyTorch calls too), then
elementwise ops on the full tensor (the prologue), exactly ONE reducing op (a reduction over contiguous dims,
a norm module, or a softmax over any dim), then elementwise ops after it (the epilogue). The epilogue either
works on the reduced result (`reduce` mode: logsumexp -> mish) or combines it with full-size values
(`normalise` mode: x / sqrt(mean(x**2) + eps), layer norm -> gelu). Everything but the library op becomes one
Triton kernel (plus a tiny partial-statistics kernel when few long rows must be split across programs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.codegen.fused_elementwise import identifier
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpKind, OpNode, Ref, Value, number

__all__ = ["Leaf", "ReducePlan", "plan_reduction"]

_FLOAT_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")
# Leaf spaces: where a tensor operand is read. full: at the element's flat offset; bfull: broadcast onto the
# full tensor; out: at the reduced result's offset; bout: broadcast onto the reduced result.
FULL, BFULL, OUT, BOUT = "full", "bfull", "out", "bout"


@dataclass(frozen=True)
class Leaf:
    """A tensor operand of the fused kernel."""

    ref: str
    arg: str  # identifier in the launcher and the kernel
    expr: str  # how ModelNew.forward passes it
    space: str  # FULL | BFULL | OUT | BOUT


@dataclass(frozen=True)
class Scalar:
    path: str
    arg: str
    expr: str


@dataclass(frozen=True)
class ReducePlan:
    """What the kernel computes; see the module docstring."""

    library: OpNode | None
    library_var: str
    reducer: OpNode
    pre: tuple[OpNode, ...]  # full-size elementwise nodes that do not depend on the reducer
    post_reduced: tuple[OpNode, ...]  # elementwise nodes on the reduced result (reduce mode)
    post_full: tuple[OpNode, ...]  # full-size elementwise nodes after the reducer (normalise mode)
    mode: str  # "reduce" | "normalise"
    leaves: tuple[Leaf, ...]
    scalars: tuple[Scalar, ...]
    full_rank: int
    output: str
    prefix: tuple[OpNode, ...] = ()  # pooling modules before the library op, each feeding the next (PyTorch)

    def describe(self) -> str:
        ops = [n.op for n in (*self.pre, self.reducer, *self.post_reduced, *self.post_full)]
        text = " -> ".join(ops[:8]) + (f" -> ... ({len(ops)} ops)" if len(ops) > 8 else "")
        return text.replace("nn_", "")


def plan_reduction(graph: OpGraph) -> ReducePlan:
    """The plan for `graph`, or NotApplicable with the reason."""
    nodes = list(graph.nodes)
    prefix, library = _library_stage(graph, nodes)
    reducers = [n for n in nodes if n.kind in (OpKind.REDUCTION, OpKind.NORM, OpKind.SOFTMAX)]
    if len(reducers) != 1:
        found = ", ".join(n.op for n in reducers) or "none"
        raise NotApplicable(f"the forward needs exactly one reduction / norm / softmax (found: {found})")
    reducer = reducers[0]
    for node in nodes:
        if node is not reducer and node.kind is not OpKind.ELEMENTWISE:
            raise NotApplicable(f"{node.op} ({node.origin}) is neither elementwise nor the reduction")
    if not nodes or graph.output.name != nodes[-1].name:
        raise NotApplicable("the forward's output is not its last op")
    source = reducer.operands[0]
    if not isinstance(source, Ref):
        raise NotApplicable(f"{reducer.op} reads a constant")
    full_shape = graph.shape_of(source.name)
    if not full_shape:
        raise NotApplicable(f"{reducer.op} reads a 0-d tensor")
    _check_dtype(graph, source.name, reducer.op)
    depends = _dependants(nodes, reducer.name)
    pre = tuple(n for n in nodes if n.name not in depends and n is not reducer)
    reduced_out = reducer.kind is OpKind.REDUCTION
    post_reduced: list[OpNode] = []
    post_full: list[OpNode] = []
    for node in nodes:
        if node.name not in depends:
            continue
        if reduced_out and node.shape == reducer.shape and not post_full:
            post_reduced.append(node)
        else:
            post_full.append(node)
    for node in pre:
        if node.shape != full_shape:
            raise NotApplicable(f"{node.op} before {reducer.op} does not have the reduced input's shape")
    for node in post_full:
        if node.shape != full_shape:
            raise NotApplicable(
                f"{node.op} after {reducer.op} has neither the input's nor the result's shape"
            )
    mode = "normalise" if (post_full or not reduced_out) else "reduce"
    if reducer.op in ("argmax", "argmin") and (post_reduced or post_full):
        raise NotApplicable(f"ops after {reducer.op} (integer indices) are not fused")
    if mode == "normalise" and reduced_out and reducer.param("keepdim") != Const(True):
        raise NotApplicable(f"{reducer.op} without keepdim=True cannot broadcast back over the input")
    _check_specialised(graph, reducer)
    library_var, leaf_exprs = _leaf_exprs(graph, library)
    leaves, scalars = _operands(graph, library, reducer, pre, post_reduced, post_full, leaf_exprs)
    if not any(leaf.space == FULL for leaf in leaves):
        raise NotApplicable("no operand has the reduced input's shape")
    return ReducePlan(
        library,
        library_var,
        reducer,
        pre,
        tuple(post_reduced),
        tuple(post_full),
        mode,
        leaves,
        scalars,
        len(full_shape),
        graph.output.name,
        prefix,
    )


def _library_stage(graph: OpGraph, nodes: list[OpNode]) -> tuple[tuple[OpNode, ...], OpNode | None]:
    """(pooling modules before it, the library op), both removed from `nodes`; ((), None) without a library
    op.

    The library op must read forward inputs and parameters, or the pooling chain before it: `avg_pool(x)` ->
    `conv_transpose` stays `self.conv_transpose(self.avg_pool(x))` in PyTorch, and its output is what the
    kernel reads. A pool output used anywhere else is not supported (the kernel would need it as a second
    input)."""
    lead = 0
    while lead < len(nodes) and nodes[lead].kind is OpKind.POOL and nodes[lead].module_path is not None:
        lead += 1
    if lead == len(nodes) or nodes[lead].kind is not OpKind.LIBRARY:
        return (), None
    chain = nodes[: lead + 1]
    del nodes[: lead + 1]
    for i, node in enumerate(chain):
        previous = chain[i - 1].name if i else None
        for k, operand in enumerate(node.operands):
            if not isinstance(operand, Ref) or graph.tensor(operand.name) is not None:
                continue
            if k != 0 or operand.name != previous:
                raise NotApplicable(f"{node.op} reads a computed tensor {operand.name}")
        if i and node.operands[0] != Ref(chain[i - 1].name):
            raise NotApplicable(f"{node.op} does not read {chain[i - 1].op}'s output")
        if i < lead and [u.name for u in graph.users(node.name)] != [chain[i + 1].name]:
            raise NotApplicable(f"{node.op}'s output is used by more than {chain[i + 1].op}")
    return tuple(chain[:-1]), chain[-1]


def _check_specialised(graph: OpGraph, reducer: OpNode) -> None:
    """F.layer_norm's normalized_shape without weight / bias is a constant; when the analysis answered shape
    introspection with the analysed sizes it may hold for those sizes only, so it is not baked into a
    kernel."""
    affine = any(isinstance(v, Ref) for v in reducer.operands[1:])
    if reducer.op == "layer_norm" and graph.shape_specialised and not affine:
        raise NotApplicable(
            "layer_norm's normalized_shape was computed from input sizes (specialised at analysis) and no"
            " weight / bias gives it at run time"
        )


def _check_dtype(graph: OpGraph, name: str, op: str) -> None:
    info = graph.tensor(name)
    node = graph.node(name)
    dtype = info.dtype if info is not None else (node.dtype if node is not None else "")
    if dtype != "torch.float32":
        raise NotApplicable(f"{op} input has dtype {dtype}; the kernels accumulate fp32 inputs only")


def _dependants(nodes: list[OpNode], root: str) -> set[str]:
    seen = {root}
    for node in nodes:
        if any(isinstance(v, Ref) and v.name in seen for v in _values(node)):
            seen.add(node.name)
    seen.discard(root)
    return seen


def _values(node: OpNode) -> tuple[Value, ...]:
    return (*node.operands, *(v for _, v in node.params))


def _leaf_exprs(graph: OpGraph, library: OpNode | None) -> tuple[str, dict[str, str]]:
    exprs = {info.name: info.name for info in graph.inputs}
    exprs.update({info.name: f"self.{info.name}" for info in graph.attrs})
    library_var = ""
    if library is not None:
        library_var = "y" if "y" not in exprs else f"{library.name}_out"
        exprs[library.name] = library_var
    return library_var, exprs


def _operands(
    graph: OpGraph,
    library: OpNode | None,
    reducer: OpNode,
    pre: tuple[OpNode, ...],
    post_reduced: list[OpNode],
    post_full: list[OpNode],
    leaf_exprs: dict[str, str],
) -> tuple[tuple[Leaf, ...], tuple[Scalar, ...]]:
    full_shape = graph.shape_of(reducer.operands[0].name)  # type: ignore[union-attr]
    inside = {n.name for n in (*pre, reducer, *post_reduced, *post_full)}
    taken: set[str] = set()
    leaves: dict[str, Leaf] = {}
    scalars: dict[str, Scalar] = {}
    sections = [(pre, False), ((reducer,), False), (tuple(post_full), False), (tuple(post_reduced), True)]
    for section, reduced in sections:
        for node in section:
            values = _values(node) if node is not reducer else reducer.operands[:1]
            for value in values:
                if isinstance(value, AttrScalar) and value.path not in scalars:
                    scalars[value.path] = Scalar(
                        value.path, identifier(value.path, taken), f"float(self.{value.path})"
                    )
                if not isinstance(value, Ref) or value.name in inside:
                    continue
                space = _space(graph, value.name, reducer.shape if reduced else full_shape, reduced)
                known = leaves.get(value.name)
                if known is not None and known.space != space:
                    raise NotApplicable(f"{value.name} is read both per element and per reduced result")
                if known is not None:
                    continue
                if value.name not in leaf_exprs:
                    raise NotApplicable(f"{value.name} is computed outside the fusable ops")
                leaves[value.name] = Leaf(
                    value.name, identifier(value.name, taken), leaf_exprs[value.name], space
                )
    if reducer.kind is OpKind.NORM:
        for operand in reducer.operands[1:]:
            if isinstance(operand, Ref):
                arg = identifier(operand.name, taken)
                leaves[operand.name] = Leaf(
                    operand.name, arg, _affine_expr(reducer, operand.name, len(full_shape), leaf_exprs), BFULL
                )
    return tuple(leaves.values()), tuple(scalars.values())


def _space(graph: OpGraph, name: str, shape: tuple[int, ...], reduced: bool) -> str:
    _check_dtype(graph, name, f"operand {name}")
    own = graph.shape_of(name)
    if own == shape:
        return OUT if reduced else FULL
    if len(own) > len(shape):
        raise NotApplicable(f"operand {name} has more dimensions than the tensor it combines with")
    padded = (1,) * (len(shape) - len(own)) + own
    dims = [d for d, s in enumerate(padded) if s != 1]
    if dims and any(padded[d] != shape[d] for d in range(dims[0], dims[-1] + 1)):
        raise NotApplicable(f"operand {name}{list(own)} does not broadcast as one block onto {list(shape)}")
    return BOUT if reduced else BFULL


def _affine_expr(norm: OpNode, path: str, rank: int, leaf_exprs: dict[str, str]) -> str:
    """Layer norm's affine parameters already align with the trailing dims; group / instance norm's are per
    channel (dim 1), so they are viewed as (C, 1, ..., 1) to broadcast over the spatial dims. F.layer_norm's
    may also be forward inputs (read by name)."""
    if norm.op == "layer_norm":
        if path not in leaf_exprs:
            raise NotApplicable(f"layer_norm's affine operand {path} is computed in the forward")
        return leaf_exprs[path]
    if norm.op == "nn_layer_norm" or rank <= 2:
        return f"self.{path}"
    return f"self.{path}.view(-1{', 1' * (rank - 2)})"


def stem(plan: ReducePlan) -> str:
    """A readable name for the kernel (`layer_norm_gelu`, `mean`, `logsumexp_mish`)."""
    ops: list[str] = []
    for node in (plan.reducer, *plan.post_reduced, *plan.post_full):
        op = node.op.removeprefix("nn_").replace("truediv", "div")
        if op not in ops:
            ops.append(op)
    return re.sub(r"\W", "_", "_".join(ops[:3]) + ("_etc" if len(ops) > 3 else ""))


def reduce_dims(node: OpNode) -> tuple[str, tuple[int, ...] | None]:
    """For a reduction / softmax: the forward expression of its dim(s) and their value at analysis time."""
    dim = node.param("dim")
    if isinstance(dim, AttrScalar):
        return f"self.{dim.path}", (int(dim.value),)
    if isinstance(dim, Const) and isinstance(dim.value, int) and not isinstance(dim.value, bool):
        return repr(dim.value), (dim.value,)
    if isinstance(dim, Const) and isinstance(dim.value, tuple) and dim.value:
        if all(isinstance(d, int) and not isinstance(d, bool) for d in dim.value):
            return repr(tuple(dim.value)), tuple(int(d) for d in dim.value)
    value = number(dim)
    raise NotApplicable(f"{node.op} over dim={value if value is not None else dim} is not supported")
