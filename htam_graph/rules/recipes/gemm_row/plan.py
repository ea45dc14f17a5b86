"""The plan of `fusion.reduction_with_epilogue` on a 2-d library output: every op after it, per row.

The library op (linear / matmul / mm, kept as the cuBLAS call) writes y[M, N]. Every later value of the
forward is then, per row r of y, either a ROW vector (N features, or N / k after a feature pooling) or one
SCALar per row; size-1 dims and views (unsqueeze / squeeze / contiguous) do not matter for that form, so they
are aliases. What a step may do (anything else makes the recipe not applicable, with the reason):

- elementwise ops with operands that are other values, scalars, or tensors read per element, per feature,
  per row or as one number;
- sum / mean / amax / amin / logsumexp over ALL feature dims of a row (-> a scalar per row), or over size-1
  dims of a scalar (the identity: one element's sum, mean, max or logsumexp is itself);
- softmax / log_softmax over the one feature dim;
- instance norm over the features of one channel, layer norm over all features (row statistics);
- batch norm of the 2-d value (column statistics: a small column-statistics kernel runs first);
- avg_pool1d / max_pool1d over the features of one channel with stride == kernel size (a power of two);
- dropout directly on the library output: kept as torch's own call when active (same RNG stream), skipped
  when inactive (eval mode or p == 0), decided at run time, never assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.codegen.fused_elementwise import identifier
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpKind, OpNode, Ref, Value, number

__all__ = ["RowLeaf", "RowPlan", "RowStep", "plan_rows"]

ROW, SCAL = "row", "scal"
_ROW_REDUCERS = ("sum", "mean", "amax", "amin", "logsumexp")
_LIBRARY_OPS = ("linear", "matmul", "mm")
# names the generated kernels and launchers use for themselves
_KERNEL_LOCALS = frozenset(
    "row rows out block num_warps n_rows n0 n1 n2 n3 cols0 mask0 bn bn_mean bn_rstd update running "
    "acc mean var"
    " centred group w_reduced b_reduced rstd run_mean run_var eps momentum unbiased col_mask".split()
)


@dataclass(frozen=True)
class RowLeaf:
    """A tensor operand of the kernels: `kind` is elem | feat | row | one (how it is indexed)."""

    ref: str
    arg: str
    expr: str
    kind: str


@dataclass(frozen=True)
class RowStep:
    """One node and what the kernel does with it (`action`), with the space and stage of its result."""

    node: OpNode
    action: str  # alias | ew | reduce | identity | softmax | row_norm | batch_norm | pool
    space: str  # ROW | SCAL
    stage: int  # 0: the N features of y; s > 0: after s feature poolings
    source: str = ""  # the node whose value an alias / identity / reduction reads


@dataclass(frozen=True)
class RowPlan:
    """Everything the code generator needs; see the module docstring."""

    library: OpNode
    library_var: str
    dropout: OpNode | None
    steps: tuple[RowStep, ...]
    leaves: tuple[RowLeaf, ...]
    scalars: tuple[tuple[str, str], ...]  # (attribute path, kernel argument)
    output: RowStep
    out_rank: int
    out_feature_dim: int  # the dim of the output that holds the features (ROW outputs), else -1

    @property
    def pools(self) -> tuple[RowStep, ...]:
        return tuple(s for s in self.steps if s.action == "pool")

    @property
    def batch_norm(self) -> RowStep | None:
        return next((s for s in self.steps if s.action == "batch_norm"), None)

    def describe(self) -> str:
        ops = [s.node.op.removeprefix("nn_") for s in self.steps if s.action != "alias"]
        return " -> ".join(ops) or "copy"


def plan_rows(graph: OpGraph) -> RowPlan:
    """The plan for `graph`, or NotApplicable with the reason."""
    nodes = list(graph.nodes)
    while nodes and nodes[0].kind is OpKind.LAYOUT and nodes[0].op == "t":
        _check_param_view(graph, nodes.pop(0))
    if not nodes or nodes[0].kind is not OpKind.LIBRARY or nodes[0].op not in _LIBRARY_OPS:
        raise NotApplicable("the forward does not start with a linear / matmul library call")
    library, tail = nodes[0], nodes[1:]
    _check_library(graph, library)
    if not tail:
        raise NotApplicable(f"{library.op} has no epilogue")
    m = library.shape[0]
    taken = set(_KERNEL_LOCALS)  # leaf arguments keep their forward names unless a kernel local has it
    inputs = {info.name for info in graph.inputs}
    library_var = identifier("y" if "y" not in inputs else "library_out", taken)
    known: dict[str, RowStep] = {library.name: RowStep(library, "library", ROW, 0)}
    leaves: dict[str, RowLeaf] = {}
    scalars: dict[str, tuple[str, str]] = {}
    dropout = None
    steps: list[RowStep] = []
    for node in tail:
        if node.kind is OpKind.RANDOM:
            if node.operands[0] != Ref(library.name) or steps:
                raise NotApplicable("dropout is fused only directly on the library output")
            dropout = node
            known[node.name] = RowStep(node, "alias", ROW, 0, library.name)
            continue
        step = _step(graph, node, m, known)
        if step.action == "ew":
            _collect_operands(graph, node, step, m, known, leaves, scalars, taken)
        if step.action in ("row_norm", "batch_norm"):
            _collect_affine(graph, node, step, leaves, taken)
        known[node.name] = step
        steps.append(step)
    if graph.output.name not in known or graph.output.name == library.name:
        raise NotApplicable("the forward's output is not computed after the library op")
    out = known[graph.output.name]
    if dropout is not None and out.node is dropout:
        raise NotApplicable("the forward returns the dropout output itself")
    out_node = graph.node(graph.output.name)
    assert out_node is not None
    _check_batch_norm_prologue(steps)
    feature_dims = [d for d, s in enumerate(out_node.shape) if d > 0 and s != 1]
    if out.space == ROW and len(feature_dims) != 1:
        raise NotApplicable(f"the output {list(out_node.shape)} spreads the features over several dims")
    return RowPlan(
        library,
        library_var,
        dropout,
        tuple(steps),
        tuple(leaves.values()),
        tuple(scalars.values()),
        out,
        len(out_node.shape),
        feature_dims[0] if out.space == ROW else -1,
    )


def _check_param_view(graph: OpGraph, node: OpNode) -> None:
    operand = node.operands[0]
    info = graph.tensor(operand.name) if isinstance(operand, Ref) else None
    if info is None or info.kind == "input":
        raise NotApplicable(f"{node.op} of something other than a parameter")


def _check_library(graph: OpGraph, library: OpNode) -> None:
    for operand in library.operands:
        if not isinstance(operand, Ref):
            continue
        if graph.tensor(operand.name) is None:
            view = graph.node(operand.name)
            if view is None or view.op != "t":
                raise NotApplicable(f"{library.op} reads a computed tensor {operand.name}")
        if _dtype(graph, operand.name) != "torch.float32":
            raise NotApplicable(f"{library.op} operand {operand.name} is not float32")
    if len(library.shape) != 2:
        raise NotApplicable(f"{library.op} output {list(library.shape)} is not 2-d")
    first = library.operands[0]
    if not isinstance(first, Ref) or len(graph.shape_of(first.name)) != 2:
        raise NotApplicable(f"{library.op} input is not 2-d (batched matmuls are not row-planned)")


def _dtype(graph: OpGraph, name: str) -> str:
    info = graph.tensor(name)
    node = graph.node(name)
    return info.dtype if info is not None else (node.dtype if node is not None else "")


def _features(shape: tuple[int, ...]) -> int:
    return math.prod(shape[1:])


def _source(node: OpNode, known: dict[str, RowStep]) -> RowStep:
    operand = node.operands[0]
    if not isinstance(operand, Ref) or operand.name not in known:
        raise NotApplicable(f"{node.op} ({node.origin}) reads a value computed outside the epilogue")
    return known[operand.name]


def _step(graph: OpGraph, node: OpNode, m: int, known: dict[str, RowStep]) -> RowStep:
    if not node.shape or node.shape[0] != m:
        raise NotApplicable(f"{node.op} ({node.origin}) changes the batch dim: {list(node.shape)}")
    if node.dtype != "torch.float32":
        raise NotApplicable(f"{node.op} produces {node.dtype}; the kernels write float32 only")
    if node.kind is OpKind.ELEMENTWISE:
        spaces = [known[v.name] for v in node.operands if isinstance(v, Ref) and v.name in known]
        if not spaces:
            raise NotApplicable(f"{node.op} ({node.origin}) does not read the library output's values")
        rows = {s.stage for s in spaces if s.space == ROW}
        widths = {_features(graph.shape_of(s.node.name)) for s in spaces if s.space == ROW} or {1}
        if widths != {_features(node.shape)}:  # e.g. [M, 1, N] + [M, N] broadcasts to [M, M, N]
            raise NotApplicable(f"{node.op} ({node.origin}) broadcasts its operands to {list(node.shape)}")
        if len(rows) > 1:
            raise NotApplicable(f"{node.op} combines rows before and after a pooling")
        if rows:
            return RowStep(node, "ew", ROW, rows.pop())
        return RowStep(node, "ew", SCAL, max(s.stage for s in spaces))
    src = _source(node, known)
    if node.kind in (OpKind.LAYOUT, OpKind.IDENTITY):
        _check_view(node, graph, m)
        return RowStep(node, "alias", src.space, src.stage, src.node.name)
    if node.kind is OpKind.REDUCTION:
        return _reduction(graph, node, src)
    if node.kind is OpKind.SOFTMAX:
        _check_single_feature_dim(graph, node, src)
        return RowStep(node, "softmax", ROW, src.stage, src.node.name)
    if node.kind is OpKind.NORM:
        return _norm(graph, node, src)
    if node.kind is OpKind.POOL:
        return _pool(graph, node, src)
    raise NotApplicable(f"{node.op} ({node.origin}) is not fused by the row plan")


def _check_view(node: OpNode, graph: OpGraph, m: int) -> None:
    if node.op in ("unsqueeze", "squeeze"):
        dim = number(node.param("dim"))
        rank = len(node.shape) if node.op == "unsqueeze" else len(graph.shape_of(node.operands[0].name))  # type: ignore[union-attr]
        if dim is None and (node.op == "unsqueeze" or m == 1):
            raise NotApplicable(f"{node.op} without a dim may move the batch dim")
        if dim is not None and int(dim) % rank == 0:
            raise NotApplicable(f"{node.op} of dim 0 moves the batch dim")
    elif node.op not in ("clone", "contiguous", "detach"):
        raise NotApplicable(f"{node.op} ({node.origin}) is a layout change the row plan cannot alias")


def _dims(node: OpNode, rank: int) -> list[int]:
    dim = node.param("dim")
    value = dim.value if isinstance(dim, Const) else number(dim)
    values = value if isinstance(value, tuple) else (value,)
    if not values or any(not isinstance(d, int) or isinstance(d, bool) for d in values):
        raise NotApplicable(f"{node.op} over dim={value!r}")
    return sorted({int(d) % rank for d in values})


def _reduction(graph: OpGraph, node: OpNode, src: RowStep) -> RowStep:
    if node.op not in _ROW_REDUCERS:
        raise NotApplicable(f"{node.op} is not one of {', '.join(_ROW_REDUCERS)}")
    in_shape = graph.shape_of(src.node.name)
    dims = _dims(node, len(in_shape))
    if 0 in dims:
        raise NotApplicable(f"{node.op} reduces the batch dim")
    if src.space == SCAL:
        return RowStep(node, "identity", SCAL, src.stage, src.node.name)  # over size-1 dims: itself
    wide = [d for d in range(1, len(in_shape)) if in_shape[d] != 1]
    if any(d not in dims for d in wide):
        raise NotApplicable(f"{node.op} over dims {dims} leaves some features of {list(in_shape)} unreduced")
    return RowStep(node, "reduce", SCAL, src.stage, src.node.name)


def _check_single_feature_dim(graph: OpGraph, node: OpNode, src: RowStep) -> None:
    in_shape = graph.shape_of(src.node.name)
    if src.space != ROW:
        raise NotApplicable(f"{node.op} over a size-1 dim")
    dims = _dims(node, len(in_shape))
    wide = [d for d in range(1, len(in_shape)) if in_shape[d] != 1]
    if dims != wide:
        raise NotApplicable(f"{node.op} over dim {dims} is not over the features {list(in_shape)}")


def _norm(graph: OpGraph, node: OpNode, src: RowStep) -> RowStep:
    shape = graph.shape_of(src.node.name)
    if src.space != ROW:
        raise NotApplicable(f"{node.op} of a scalar per row")
    if node.op == "nn_instance_norm":
        if len(shape) < 3 or shape[1] != 1:
            raise NotApplicable("instance norm with more than one channel (per-channel statistics)")
        if node.param("track_running_stats") != Const(False):
            raise NotApplicable("instance norm with running statistics")
        return RowStep(node, "row_norm", ROW, src.stage, src.node.name)
    if node.op == "nn_layer_norm":
        normalized = node.param("normalized_shape")
        dims = (
            tuple(normalized.value)
            if isinstance(normalized, Const) and isinstance(normalized.value, tuple)
            else ()
        )
        if not dims or math.prod(dims) != _features(shape) or tuple(shape[-len(dims) :]) != dims:
            raise NotApplicable("layer norm over fewer than all the features")
        return RowStep(node, "row_norm", ROW, src.stage, src.node.name)
    if node.op == "nn_batch_norm":
        if len(shape) != 2 or src.stage != 0:
            raise NotApplicable("batch norm of a value that is not the 2-d [rows, features] tensor")
        if number(node.param("momentum")) is None:
            raise NotApplicable("batch norm with momentum=None (cumulative average) is not supported")
        if node.param("track_running_stats") != Const(True) and node.param("track_running_stats") != Const(
            False
        ):
            raise NotApplicable("batch norm with an unknown track_running_stats")
        return RowStep(node, "batch_norm", ROW, 0, src.node.name)
    raise NotApplicable(f"{node.op} is not fused by the row plan")


def _pool(graph: OpGraph, node: OpNode, src: RowStep) -> RowStep:
    shape = graph.shape_of(src.node.name)
    if node.op not in ("avg_pool1d", "max_pool1d") or len(shape) != 3 or shape[1] != 1 or src.space != ROW:
        raise NotApplicable(f"{node.op} is not a 1-d pooling over the features of one channel")
    k = pool_size(node)
    stride_value = node.param("stride")
    stride = stride_value.value if isinstance(stride_value, Const) else number(stride_value)
    stride = stride[0] if isinstance(stride, tuple) and len(stride) == 1 else stride
    if stride not in (None, k) or k & (k - 1):
        raise NotApplicable(
            f"{node.op} with stride {stride} != kernel {k} or a kernel that is not a power of 2"
        )
    expected = {"padding": 0, "ceil_mode": False, "dilation": 1, "return_indices": False}
    for name, default in expected.items():
        try:
            value = node.param(name).value  # type: ignore[union-attr]
        except (KeyError, AttributeError):
            continue
        value = value[0] if isinstance(value, tuple) and len(value) == 1 else value
        if value != default:
            raise NotApplicable(f"{node.op} with {name}={value!r}")
    return RowStep(node, "pool", ROW, src.stage + 1, src.node.name)


def pool_size(node: OpNode) -> int:
    """The window of a 1-d pooling node (an int or a 1-tuple in the module)."""
    value = node.param("kernel_size")
    k = value.value if isinstance(value, Const) else number(value)
    k = k[0] if isinstance(k, tuple) and len(k) == 1 else k
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise NotApplicable(f"{node.op} with kernel_size={k!r}")
    return k


def _check_batch_norm_prologue(steps: list[RowStep]) -> None:
    """The column statistics kernel recomputes the values batch norm reads: only views and elementwise ops."""
    index = next((i for i, s in enumerate(steps) if s.action == "batch_norm"), None)
    if index is None:
        return
    if sum(s.action == "batch_norm" for s in steps) > 1:
        raise NotApplicable("more than one batch norm")
    for step in steps[:index]:
        if step.action not in ("alias", "ew") or step.space != ROW:
            raise NotApplicable(f"{step.node.op} before batch norm (its statistics need elementwise inputs)")


def _collect_operands(
    graph: OpGraph,
    node: OpNode,
    step: RowStep,
    m: int,
    known: dict[str, RowStep],
    leaves: dict[str, RowLeaf],
    scalars: dict[str, tuple[str, str]],
    taken: set[str],
) -> None:
    values: list[Value] = [*node.operands, *(v for _, v in node.params)]
    for value in values:
        if isinstance(value, AttrScalar) and value.path not in scalars:
            scalars[value.path] = (value.path, identifier(value.path, taken))
        if not isinstance(value, Ref) or value.name in known:
            continue
        info = graph.tensor(value.name)
        if info is None:
            raise NotApplicable(f"{value.name} is computed outside the fusable ops")
        if info.dtype != "torch.float32":
            raise NotApplicable(f"operand {value.name} is {info.dtype}, not float32")
        kind = _leaf_kind(info.shape, node.shape, step.space, m)
        known_leaf = leaves.get(value.name)
        if known_leaf is not None and known_leaf.kind != kind:
            raise NotApplicable(f"{value.name} is read in two different layouts")
        expr = info.name if info.kind == "input" else f"self.{info.name}"
        leaves[value.name] = RowLeaf(value.name, identifier(value.name, taken), expr, kind)


def _leaf_kind(shape: tuple[int, ...], out: tuple[int, ...], space: str, m: int) -> str:
    if math.prod(shape) == 1 and len(shape) <= len(out):
        return "one"
    if len(shape) > len(out):
        raise NotApplicable(f"operand {list(shape)} has more dims than {list(out)}")
    padded = (1,) * (len(out) - len(shape)) + tuple(shape)
    if padded == tuple(out) and space == ROW:
        return "elem"
    if padded[0] == m and all(s == 1 for s in padded[1:]):
        return "row"
    if space == ROW and padded[0] == 1 and all(p in (1, o) for p, o in zip(padded[1:], out[1:], strict=True)):
        if math.prod(padded) == _features(out):
            return "feat"
    raise NotApplicable(
        f"operand {list(shape)} does not broadcast per element, feature or row onto {list(out)}"
    )


def _collect_affine(
    graph: OpGraph, node: OpNode, step: RowStep, leaves: dict[str, RowLeaf], taken: set[str]
) -> None:
    for operand in node.operands[1:3]:
        if not isinstance(operand, Ref):
            continue
        info = graph.tensor(operand.name)
        if info is None or info.dtype != "torch.float32":
            raise NotApplicable(f"{node.op} affine parameter {operand.name} is not a float32 parameter")
        kind = "one" if math.prod(info.shape) == 1 else "feat"
        leaves[operand.name] = RowLeaf(
            operand.name, identifier(operand.name, taken), f"self.{info.name}", kind
        )
