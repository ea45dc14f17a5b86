"""The plan of reduction_structure.block_scan: which scan a forward computes (see block_scan.py), proved
from its op graph node by node, or NotApplicable with the reason."""

from __future__ import annotations

from dataclasses import dataclass

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpKind, OpNode, Ref, Value, number

__all__ = ["ScanPlan", "plan_scan"]

_FLOAT_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")


@dataclass(frozen=True)
class ScanPlan:
    (
        """`op` (cumsum / cumprod) along `dim` of `source`, """
        """or of `pre` (elementwise ops on same-shaped inputs)."""
    )

    op: str
    source: str  # the input the scan reads (the first tensor input of the prologue when there is one)
    dim: Value
    exclusive: bool
    reverse: bool = False  # scan from the end of the dim (flip(scan(flip(x, d), d), d))
    pre: tuple[OpNode, ...] = ()  # inclusive scans only: elementwise ops computing the scanned values
    leaves: tuple[str, ...] = ()  # every tensor the kernel loads (source first)

    @property
    def tensors(self) -> tuple[str, ...]:
        return self.leaves or (self.source,)

    @property
    def name(self) -> str:
        return ("exclusive_" if self.exclusive else "") + ("reverse_" if self.reverse else "") + self.op


def plan_scan(graph: OpGraph) -> ScanPlan:
    """The plan for `graph`, or NotApplicable with the reason."""
    scans = [n for n in graph.nodes if n.kind is OpKind.SCAN]
    if len(scans) != 1:
        raise NotApplicable(f"the forward needs exactly one cumsum/cumprod (found {len(scans)})")
    scan = scans[0]
    if len(graph.nodes) == 1 and graph.output.name == scan.name:
        plan = ScanPlan(scan.op, _input_name(graph, scan.operands[0], scan.op), scan.param("dim"), False)
    elif graph.output.name == scan.name:
        plan = _prologue_plan(graph, scan)
    elif graph.nodes[-1].op == "flip":
        plan = _reverse_plan(graph, scan)
    else:
        plan = _exclusive_plan(graph, scan)
    info = graph.tensor(plan.source)
    if info is None or info.dtype not in _FLOAT_DTYPES:
        raise NotApplicable(f"{plan.op} of a non-float tensor (integer scans change dtype)")
    if not info.shape:
        raise NotApplicable(f"{plan.op} of a 0-d tensor")
    return plan


def _prologue_plan(graph: OpGraph, scan: OpNode) -> ScanPlan:
    """An inclusive scan of elementwise ops on inputs of the scan's shape (e.g. cumsum(x * mask))."""
    pre = graph.nodes[:-1]
    for node in pre:
        if node.kind is not OpKind.ELEMENTWISE or node.shape != scan.shape:
            raise NotApplicable(f"{node.op} before {scan.op} is not elementwise on the scanned shape")
    if scan.operands[0] != Ref(pre[-1].name):
        raise NotApplicable(f"{scan.op} does not read the last elementwise op")
    leaves: list[str] = []
    for node in pre:
        for value in (*node.operands, *(v for _, v in node.params)):
            if isinstance(value, AttrScalar):
                raise NotApplicable(
                    f"{node.op} reads the module attribute {value.path} (not fused into a scan)"
                )
            if isinstance(value, Ref) and graph.node(value.name) is None and value.name not in leaves:
                info = graph.tensor(value.name)
                if (
                    info is None
                    or info.shape != scan.shape
                    or info.dtype not in (*_FLOAT_DTYPES, "torch.bool")
                ):
                    raise NotApplicable(f"{value.name} is not a float/bool input of the scanned shape")
                leaves.append(value.name)
    floats = [n for n in leaves if graph.tensor(n).dtype in _FLOAT_DTYPES]  # type: ignore[union-attr]
    if not floats or scan.dtype != graph.tensor(floats[0]).dtype:  # type: ignore[union-attr]
        raise NotApplicable(f"{scan.op} does not keep the dtype of its first float input")
    ordered = (floats[0], *(n for n in leaves if n != floats[0]))
    return ScanPlan(scan.op, floats[0], scan.param("dim"), False, pre=pre, leaves=ordered)


def _input_name(graph: OpGraph, value: Value, what: str) -> str:
    if not isinstance(value, Ref) or graph.tensor(value.name) is None:
        raise NotApplicable(f"{what} reads {value}, not a forward input or parameter")
    return value.name


def _exclusive_plan(graph: OpGraph, scan: OpNode) -> ScanPlan:
    """Prove the cat(zeros, cumsum(narrow)) exclusive-scan pattern node by node (see the module docstring)."""
    out = graph.node(graph.output.name)
    if out is None or out.op != "cat" or len(out.operands) != 2:
        raise NotApplicable(
            f"the ops around {scan.op} are neither the exclusive cat(zeros, cumsum(narrow)) nor the reverse "
            "flip(scan(flip)) pattern"
        )
    dim = out.param("dim")
    zeros, scanned = (_node(graph, v) for v in out.operands)
    if scanned is not scan or scan.op != "cumsum" or scan.param("dim") != dim:
        raise NotApplicable("cat's second operand is not a cumsum along cat's dim")
    narrow = _node(graph, scan.operands[0])
    x = _input_name(graph, narrow.operands[0] if narrow.op == "narrow" else Const(None), "narrow")
    if narrow.param("dim") != dim or number(narrow.param("start")) != 0:
        raise NotApplicable("the scanned slice is not x.narrow(dim, 0, ...) along the scan dim")
    length = _node(graph, narrow.param("length"))
    size = _node(graph, length.operands[0]) if length.op == "int_sub" else None
    if size is None or length.operands[1] != Const(1) or size.op != "size":
        raise NotApplicable("the narrow length is not x.size(dim) - 1")
    if size.operands[0] != Ref(x) or size.param("dim") != dim:
        raise NotApplicable("the narrow length is the size of another tensor or dim")
    if zeros.op != "zeros_like":
        raise NotApplicable("cat's first operand is not zeros_like(...)")
    piece = _node(graph, zeros.operands[0])
    select = _node(graph, piece.operands[0]) if piece.op == "unsqueeze" else None
    if select is None or piece.param("dim") != dim or select.op != "select" or select.param("dim") != dim:
        raise NotApplicable("the zeros are not shaped like x.select(dim, i).unsqueeze(dim)")
    if select.operands[0] != Ref(x):
        raise NotApplicable("the zeros are shaped from another tensor")
    used = {n.name for n in (out, zeros, piece, select, scan, narrow, length, size)}
    if used != {n.name for n in graph.nodes}:
        raise NotApplicable("the forward computes more than the exclusive scan")
    if graph.shape_of(out.name) != graph.shape_of(x):
        raise NotApplicable("the concatenated result does not have x's shape")
    return ScanPlan("cumsum", x, dim, True)


def _reverse_plan(graph: OpGraph, scan: OpNode) -> ScanPlan:
    """flip(scan(flip(x, d), d), d) is the scan of x from the end of d (x's shape, same elements)."""
    out = graph.node(graph.output.name)
    inner = _node(graph, scan.operands[0])
    if out is None or len(graph.nodes) != 3 or out.operands[0] != Ref(scan.name) or inner.op != "flip":
        raise NotApplicable("flip around the scan is not exactly flip(scan(flip(x, d), d), d)")
    dim = scan.param("dim")
    if _flip_dim(out) != dim or _flip_dim(inner) != dim:
        raise NotApplicable("the flips are not along the scan dim (only a single-dim flip is a reverse scan)")
    return ScanPlan(scan.op, _input_name(graph, inner.operands[0], "flip"), dim, False, reverse=True)


def _flip_dim(node: OpNode) -> Value:
    dims = node.param("dims")
    if isinstance(dims, Const) and isinstance(dims.value, tuple):
        return Const(dims.value[0]) if len(dims.value) == 1 else Const(None)
    return dims


def _node(graph: OpGraph, value: Value) -> OpNode:
    node = graph.node(value.name) if isinstance(value, Ref) else None
    if node is None:
        raise NotApplicable(f"{value} is not computed by the forward")
    return node
