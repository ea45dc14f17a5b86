"""Cut the op graph into stages: library / pooling / view calls kept in PyTorch, and fused groups between
them.

Walking the forward in order, consecutive elementwise and reducing ops collect into one group; a library op
(conv, conv-transpose, linear, matmul), a pooling op, a view (unsqueeze, squeeze, .T, reshape, permute,
slicing), torch.cat, a size read, an op the rules do not know (einsum, flip, ...) or a dropout module ends the
group and becomes a PyTorch stage. A second reducing op, or an op whose shape does not fit in the group's
reduction input, starts a new group. A group's value may leave it only through its last op: when an earlier
op of the group is also read outside it, the group is cut after that op (its value is then written once and
read back by the rest). No-op calls (clone, detach, contiguous) are dropped, their readers reading the
source.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.compose.reducers import REDUCING_KINDS
from htam_graph.rules.ops import OpGraph, OpKind, OpNode, Ref, Value

__all__ = ["FusedStage", "Stage", "TorchStage", "drop_identities", "partition"]

_TORCH_KINDS = (OpKind.LIBRARY, OpKind.POOL, OpKind.LAYOUT, OpKind.STRUCTURAL, OpKind.CALL)


@dataclass(frozen=True)
class TorchStage:
    """One call left to PyTorch (cuDNN / cuBLAS for the library ops)."""

    node: OpNode

    @property
    def output(self) -> str:
        return self.node.name


@dataclass(frozen=True)
class FusedStage:
    """Ops that become one Triton kernel (see group.py)."""

    nodes: tuple[OpNode, ...]

    @property
    def output(self) -> str:
        return self.nodes[-1].name


Stage = TorchStage | FusedStage


def partition(graph: OpGraph) -> list[Stage]:
    """The stages of `graph` in forward order (see the module docstring). Raises NotApplicable."""
    stages: list[Stage] = []
    run: list[OpNode] = []
    for node in _sizes_early(graph.nodes):
        if node.kind is OpKind.ELEMENTWISE or node.kind in REDUCING_KINDS:
            if run and (_second_reduction(run, node) or _outside_reduction(graph, run, node)):
                stages.append(FusedStage(tuple(run)))
                run = []
            run.append(node)
        elif node.kind in _TORCH_KINDS or (node.kind is OpKind.RANDOM and node.module_path is not None):
            if run:
                stages.append(FusedStage(tuple(run)))
                run = []
            stages.append(TorchStage(node))
        else:
            raise NotApplicable(
                f"{node.op} ({node.origin}) is not composed: {node.kind.value} ops are not fused"
            )
    if run:
        stages.append(FusedStage(tuple(run)))
    return _single_exits(graph, stages)


def _second_reduction(run: list[OpNode], node: OpNode) -> bool:
    return node.kind in REDUCING_KINDS and any(n.kind in REDUCING_KINDS for n in run)


def _outside_reduction(graph: OpGraph, run: list[OpNode], node: OpNode) -> bool:
    """An elementwise op whose shape does not fit in the run's reduction input (`agg / deg` with agg
    [B, N, F] after deg = adj.sum(-1) over adj [B, N, N]) cannot share its kernel: it starts a new group."""
    reducer = next((n for n in run if n.kind in REDUCING_KINDS), None)
    if reducer is None or not isinstance(reducer.operands[0], Ref) or not node.shape:
        return False
    full = graph.shape_of(reducer.operands[0].name)
    padded = (1,) * (len(full) - len(node.shape)) + node.shape
    return len(node.shape) > len(full) or any(s not in (1, f) for s, f in zip(padded, full, strict=True))


def _sizes_early(nodes: tuple[OpNode, ...]) -> list[OpNode]:
    """`nodes` with each integer node (size reads, arithmetic on them) moved up to just after what it reads,
    so that `n = x.shape[-1]` written between two elementwise ops does not cut their group."""
    out: list[OpNode] = []
    for node in nodes:
        if node.dtype != "int":
            out.append(node)
            continue
        reads = {v.name for v in (*node.operands, *(v for _, v in node.params)) if isinstance(v, Ref)}
        after = max((i for i, n in enumerate(out) if n.name in reads), default=-1)
        out.insert(after + 1, node)
    return out


def _single_exits(graph: OpGraph, stages: list[Stage]) -> list[Stage]:
    """Cut every group after each op whose value is read outside its piece (another stage, a later piece of
    the same group, or the output) but is not the piece's last: cuts are added until none is needed."""
    out: list[Stage] = []
    for stage in stages:
        if isinstance(stage, TorchStage):
            out.append(stage)
            continue
        cuts: set[int] = set()
        while True:
            pieces = _pieces(stage.nodes, cuts)
            more = {i for piece in pieces for i in _exits(graph, stage.nodes, piece)} - cuts
            if not more:
                break
            cuts |= more
        out += [FusedStage(tuple(stage.nodes[i] for i in piece)) for piece in pieces]
    return out


def _pieces(nodes: tuple[OpNode, ...], cuts: set[int]) -> list[range]:
    """The index ranges of `nodes` cut after each index in `cuts`."""
    bounds = [0, *sorted(c + 1 for c in cuts if c + 1 < len(nodes)), len(nodes)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if a < b]


def _exits(graph: OpGraph, nodes: tuple[OpNode, ...], piece: range) -> list[int]:
    """Indices in `piece`, other than its last, whose value is read outside the piece or returned."""
    inside = {nodes[i].name for i in piece}
    found = []
    for i in piece[:-1]:
        node = nodes[i]
        outside = [u for u in graph.users(node.name) if u.name not in inside]
        if outside or graph.output.name == node.name:
            found.append(i)
    return found


def drop_identities(graph: OpGraph) -> OpGraph:
    """`graph` without clone / detach / contiguous calls; their readers (and the output) read the source."""
    alias: dict[str, str] = {}

    def resolve(value: Value) -> Value:
        return Ref(alias[value.name]) if isinstance(value, Ref) and value.name in alias else value

    nodes: list[OpNode] = []
    for node in graph.nodes:
        if node.kind is OpKind.IDENTITY:
            source = resolve(node.operands[0])
            if not isinstance(source, Ref):
                raise NotApplicable(f"{node.op} of a constant")
            alias[node.name] = source.name
            continue
        operands = tuple(resolve(v) for v in node.operands)
        params = tuple((k, resolve(v)) for k, v in node.params)
        nodes.append(dataclasses.replace(node, operands=operands, params=params))
    output = resolve(graph.output)
    assert isinstance(output, Ref)
    return dataclasses.replace(graph, nodes=tuple(nodes), output=output)
