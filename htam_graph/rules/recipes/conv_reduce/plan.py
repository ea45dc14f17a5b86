"""The plan of `fusion.conv_reduction_epilogue`: a convolution followed by channel / spatial structure.

The forward is a conv / conv_transpose (kept as the library call) and then a chain whose every op is one of:
elementwise ops (with per-channel or one-element parameters), ONE batch / group norm on the full-resolution
conv output, softmax / log_softmax over the channel dim, up to two max / avg pooling modules, ONE reduction
over all spatial dims (mean / sum / amax / amin, `nn.AdaptiveAvgPool*d(1)`), ONE reduction over the channel
dim (sum / mean / amax / amin / logsumexp, `torch.min(x, 1)[0]`), and reductions over dims that are already of
size 1 (the same values, a reshape).

Every value of the chain has a *layout*, named by the labels of its dims (`n`, `c`, `s0..`, `1`):
  tile   [C, positions]  before any reduction (level 0 = conv resolution, level k = after the k-th pool);
  row    [positions]     after the channel reduction;
  plane  [C]             per sample, after the spatial reduction;
  scalar                 per sample, after the spatial and the channel reductions.
The generated kernels (see `conv_reduce_codegen`) keep every channel of a block of positions in one program,
so channel reductions and softmax are in-register reductions over axis 0 and the conv output is read once.
"""

from __future__ import annotations

from dataclasses import dataclass

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.codegen.fused_elementwise import Scalar, identifier
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpKind, OpNode, Ref, Value

__all__ = ["ChanLeaf", "Step", "ConvReducePlan", "plan_conv_reduce", "TILE", "ROW", "PLANE", "SCALAR"]

TILE, ROW, PLANE, SCALAR = "tile", "row", "plane", "scalar"
CONV_OPS = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
CHANNEL_OPS = ("sum", "mean", "amax", "amin", "logsumexp")
SPATIAL_OPS = ("sum", "mean", "amax", "amin")
NORM_OPS = ("nn_batch_norm", "nn_group_norm")
# Names the generated code uses for itself: tensor / scalar arguments must not shadow them.
_RESERVED = set(
    "y x0 c cmask n s smask out out_ptr part part_ptr tile n_tiles n_grid pid acc t t0 m v mx e den res"
    " nmean nrstd nmean_ptr nrstd_ptr math torch triton tl nn".split()
)


@dataclass(frozen=True)
class ChanLeaf:
    """A tensor operand: a per-channel vector (`(C, 1, 1)` bias, norm weight) or a one-element tensor."""

    ref: str
    arg: str
    expr: str  # how ModelNew.forward passes it
    per_channel: bool


@dataclass(frozen=True)
class Step:
    """One op of the chain and where it runs."""

    node: OpNode
    role: str  # ew | norm | softmax | pool | channel | spatial | same
    layout: str  # the layout of the op's input (TILE / ROW / PLANE / SCALAR)
    level: int  # pools before it (meaningful for TILE)


@dataclass(frozen=True)
class ConvReducePlan:
    library: OpNode
    library_var: str
    steps: tuple[Step, ...]
    pools: tuple[OpNode, ...]  # window levels: pool modules, or reductions over some spatial dims
    norm: OpNode | None
    norm_chain: tuple[OpNode, ...]  # elementwise ops between the conv output and the norm input
    spatial: OpNode | None
    channel: OpNode | None
    leaves: tuple[ChanLeaf, ...]
    scalars: tuple[Scalar, ...]
    out_labels: tuple[str, ...]
    rank: int  # of the conv output
    output: str
    windows: tuple[tuple[str, tuple[int, ...]], ...] = ()  # reduction levels -> the spatial dims they span

    def window_dims(self, node: OpNode) -> tuple[int, ...] | None:
        """The 3-d padded spatial dims a reduction level spans; None for a pool module."""
        return dict(self.windows).get(node.name)

    @property
    def final_layout(self) -> str:
        if self.spatial is not None:
            return SCALAR if self.channel is not None else PLANE
        return ROW if self.channel is not None else TILE

    def describe(self) -> str:
        ops = [s.node.op.removeprefix("nn_") for s in self.steps]
        text = " -> ".join(ops[:8]) + (f" -> ... ({len(ops)} ops)" if len(ops) > 8 else "")
        return text


def plan_conv_reduce(graph: OpGraph) -> ConvReducePlan:
    """The plan for `graph`, or NotApplicable with the reason."""
    nodes = graph.nodes
    if not nodes or nodes[0].kind is not OpKind.LIBRARY or nodes[0].op not in CONV_OPS:
        raise NotApplicable("the forward does not start with a convolution")
    library = nodes[0]
    for operand in library.operands:
        if isinstance(operand, Ref) and graph.tensor(operand.name) is None:
            raise NotApplicable(f"{library.op} reads a computed tensor {operand.name}")
    if library.dtype != "torch.float32":
        raise NotApplicable(f"{library.op} output has dtype {library.dtype}; fp32 only")
    if len(nodes) < 2:
        raise NotApplicable(f"{library.op} has no epilogue")
    if graph.output.name != nodes[-1].name:
        raise NotApplicable("the forward's output is not its last op")
    builder = _Builder(graph, library)
    for node in nodes[1:]:
        builder.add(node)
    return builder.finish()


class _Builder:
    """Walks the chain once, tracking the current layout, the dim labels and the values in scope."""

    def __init__(self, graph: OpGraph, library: OpNode) -> None:
        self.graph = graph
        self.library = library
        self.channels = library.shape[1]
        self.rank = len(library.shape)
        if self.rank not in (3, 4, 5):
            raise NotApplicable(f"{library.op} output of rank {self.rank}")
        self.labels = ["n", "c", *(f"s{i}" for i in range(self.rank - 2))]
        self.layout, self.level = TILE, 0
        self.scope = {library.name}
        self.shape = library.shape
        self.steps: list[Step] = []
        self.pools: list[OpNode] = []  # pool modules and reductions over part of the spatial dims
        self.windows: dict[str, tuple[int, ...]] = {}  # such a reduction -> its 3-d padded spatial dims
        self.norm: OpNode | None = None
        self.norm_chain: tuple[OpNode, ...] = ()
        self.spatial: OpNode | None = None
        self.channel: OpNode | None = None
        self.softmax_seen = False
        self.taken: set[str] = set(_RESERVED)
        self.leaves: dict[str, ChanLeaf] = {}
        self.scalars: dict[str, Scalar] = {}
        self.library_var = "y"

    # ------------------------------------------------------------------ per op
    def add(self, node: OpNode) -> None:
        if node.kind is OpKind.ELEMENTWISE:
            self._elementwise(node)
        elif node.kind is OpKind.NORM:
            self._norm(node)
        elif node.kind is OpKind.SOFTMAX:
            self._softmax(node)
        elif node.kind is OpKind.POOL:
            self._pool(node)
        elif node.kind is OpKind.REDUCTION:
            self._reduction(node)
        else:
            raise NotApplicable(f"{node.op} ({node.origin}) is not supported after a convolution")

    def _elementwise(self, node: OpNode) -> None:
        if node.shape != self.shape:
            raise NotApplicable(f"{node.op} changes the shape {list(self.shape)} -> {list(node.shape)}")
        if node.dtype != "torch.float32":
            raise NotApplicable(f"{node.op} has dtype {node.dtype}; fp32 only")
        for value in (*node.operands, *(v for _, v in node.params)):
            self._operand(node, value)
        self._push(node, "ew")
        self.scope.add(node.name)

    def _operand(self, node: OpNode, value: Value) -> None:
        if isinstance(value, AttrScalar):
            if value.path not in self.scalars:
                arg = identifier(value.path, self.taken)
                self.scalars[value.path] = Scalar(value.path, arg, f"float(self.{value.path})")
            return
        if not isinstance(value, Ref) or value.name in self.scope:
            return
        if value.name == self.library.name or self.graph.node(value.name) is not None:
            raise NotApplicable(f"{node.op} reads {value.name} across a pool / reduction / norm boundary")
        self._leaf(value.name)

    def _leaf(self, name: str, per_channel_vector: bool = False) -> None:
        if name in self.leaves:
            return
        info = self.graph.tensor(name)
        if info is None or info.dtype != "torch.float32":
            raise NotApplicable(f"operand {name} is not an fp32 input or parameter")
        shape = info.shape
        if per_channel_vector:
            per_channel = True
            if shape != (self.channels,):
                raise NotApplicable(f"norm parameter {name} has shape {list(shape)}")
        else:
            if len(shape) > len(self.labels):
                raise NotApplicable(f"operand {name}{list(shape)} has more dims than the value it joins")
            padded = (1,) * (len(self.labels) - len(shape)) + shape
            big = [self.labels[d] for d, size in enumerate(padded) if size != 1]
            if big and (big != ["c"] or padded[self.labels.index("c")] != self.channels):
                raise NotApplicable(
                    f"operand {name}{list(shape)} is neither per-channel nor one element here"
                    f" (dims {self.labels})"
                )
            per_channel = bool(big)
        expr = name if info.kind == "input" else f"self.{name}"
        self.leaves[name] = ChanLeaf(name, identifier(name, self.taken), expr, per_channel)

    def _norm(self, node: OpNode) -> None:
        if node.op not in NORM_OPS:
            raise NotApplicable(f"{node.op} after a convolution is not supported (batch / group norm only)")
        if self.norm is not None or self.layout != TILE or self.level or self.softmax_seen:
            raise NotApplicable(f"{node.op} after a pool, a softmax or another norm")
        source = node.operands[0]
        if not isinstance(source, Ref) or source.name not in self.scope:
            raise NotApplicable(f"{node.op} does not read the conv output chain")
        self.norm_chain = self._chain_to(source.name)
        if node.op == "nn_batch_norm":
            momentum = node.param("momentum")
            if momentum == Const(None) and node.param("track_running_stats") == Const(True):
                raise NotApplicable("batch norm with momentum=None (cumulative average) is not fused")
        elif not isinstance(node.param("num_groups"), Const):
            raise NotApplicable("group norm without a constant number of groups")
        for operand in node.operands[1:]:
            if isinstance(operand, Ref):
                self._leaf(operand.name, per_channel_vector=True)
        self.norm = node
        self._push(node, "norm")
        self.scope.add(node.name)

    def _chain_to(self, name: str) -> tuple[OpNode, ...]:
        """The elementwise ops from the conv output to `name`; they may read only constants and scalars."""
        chain: list[OpNode] = []
        wanted = {name}
        for step in reversed(self.steps):
            if step.node.name not in wanted:
                continue
            for value in step.node.operands:
                if isinstance(value, Ref) and value.name in self.leaves:
                    raise NotApplicable(f"the ops before the norm read the tensor {value.name}")
                if isinstance(value, Ref):
                    wanted.add(value.name)
            chain.append(step.node)
        return tuple(reversed(chain))

    def _softmax(self, node: OpNode) -> None:
        if self.layout not in (TILE, PLANE):
            raise NotApplicable(f"{node.op} after the channel reduction")
        dims = _dims(node, len(self.labels))
        if [self.labels[d] for d in dims] != ["c"]:
            raise NotApplicable(f"{node.op} over dims {dims} (only over the channel dim)")
        self._input_in_scope(node)
        self.softmax_seen = True
        self._push(node, "softmax")
        self.scope = {node.name}

    def _pool(self, node: OpNode) -> None:
        if self.layout != TILE:
            raise NotApplicable(f"{node.op} after a reduction")
        if len(self.pools) == 2:
            raise NotApplicable("more than two pooling ops")
        if self.windows:
            raise NotApplicable(f"{node.op} after a reduction over part of the spatial dims")
        if node.module_path is None:
            raise NotApplicable(f"functional {node.op}: the window is read from an nn.*Pool module")
        if node.op.startswith("adaptive"):
            raise NotApplicable(f"{node.op}: its windows depend on the input's size")
        if node.param("return_indices") != Const(False) if node.op.startswith("max") else False:
            raise NotApplicable(f"{node.op} returns indices")
        if int(node.op[-2]) != self.rank - 2:
            raise NotApplicable(f"{node.op} on a rank-{self.rank} tensor")
        self._input_in_scope(node)
        self._push(node, "pool")
        self.pools.append(node)
        self.level += 1
        self.scope = {node.name}
        self.shape = node.shape

    def _reduction(self, node: OpNode) -> None:
        self._input_in_scope(node)
        dims = _dims(node, len(self.labels))
        reduced = {self.labels[d] for d in dims}
        keep = node.param("keepdim") == Const(True)
        spatial = {lb for lb in self.labels if lb.startswith("s")}
        if reduced <= {"1"}:
            role = "same"
        elif "c" in reduced and reduced <= {"c", "1"}:
            if self.layout not in (TILE, PLANE) or node.op not in CHANNEL_OPS:
                raise NotApplicable(f"{node.op} over the channel dim here is not supported")
            role = "channel"
        elif spatial and spatial <= reduced and reduced <= spatial | {"1"}:
            if self.layout != TILE or node.op not in SPATIAL_OPS:
                raise NotApplicable(f"{node.op} over the spatial dims here is not supported")
            role = "spatial"
        elif (
            reduced & spatial
            and reduced <= spatial | {"1"}
            and self.layout in (TILE, ROW)
            and node.op in SPATIAL_OPS
        ):
            # over some spatial dims: a window spanning those dims, like a pool level (see the codegen)
            if len(self.pools) == 2:
                raise NotApplicable("more than two pooling / partial spatial reductions")
            role = "window"
        else:
            raise NotApplicable(
                f"{node.op} over dims {sorted(reduced)} (part of the spatial dims, or channels and space)"
            )
        self._push(node, role)
        if role == "channel":
            self.channel = node
            self.layout = ROW if self.layout == TILE else SCALAR
        elif role == "spatial":
            self.spatial = node
            self.layout = PLANE
        elif role == "window":
            offset = 3 - (self.rank - 2)  # kernels see 3 spatial dims, the missing leading ones of size 1
            self.windows[node.name] = tuple(int(lb[1:]) + offset for lb in sorted(reduced & spatial))
            self.pools.append(node)
            self.level += 1
        self.labels = [
            ("1" if keep else "") if d in {x % len(self.labels) for x in dims} else lb
            for d, lb in enumerate(self.labels)
        ]
        self.labels = [lb for lb in self.labels if lb]
        if len(self.labels) != len(node.shape):
            raise NotApplicable(f"{node.op}: unexpected result shape {list(node.shape)}")
        self.scope = {node.name}
        self.shape = node.shape

    def _input_in_scope(self, node: OpNode) -> None:
        source = node.operands[0]
        if not isinstance(source, Ref) or source.name not in self.scope:
            raise NotApplicable(f"{node.op} does not read the current value of the chain")

    def _push(self, node: OpNode, role: str) -> None:
        self.steps.append(Step(node, role, self.layout, self.level))

    # ------------------------------------------------------------------ result
    def finish(self) -> ConvReducePlan:
        roles = {s.role for s in self.steps}
        if roles <= {"ew", "same"}:
            raise NotApplicable("a plain elementwise epilogue (fusion.library_epilogue covers it)")
        if self.graph.users(self.library.name) and self.library.name not in _read_names(self.steps):
            raise NotApplicable("the conv output is not read by the chain")
        names = {*self.leaves, *(i.name for i in self.graph.inputs)}
        self.library_var = "y" if "y" not in names else "conv_out"
        return ConvReducePlan(
            library=self.library,
            library_var=self.library_var,
            steps=tuple(self.steps),
            pools=tuple(self.pools),
            norm=self.norm,
            norm_chain=self.norm_chain,
            spatial=self.spatial,
            channel=self.channel,
            leaves=tuple(self.leaves.values()),
            scalars=tuple(self.scalars.values()),
            out_labels=tuple(self.labels),
            rank=self.rank,
            output=self.steps[-1].node.name,
            windows=tuple(self.windows.items()),
        )


def _read_names(steps: list[Step]) -> set[str]:
    return {v.name for s in steps for v in s.node.operands if isinstance(v, Ref)}


def _dims(node: OpNode, rank: int) -> list[int]:
    """The node's dims, normalised to 0..rank-1 (an int attribute counts as its analysis-time value)."""
    dim = node.param("dim")
    if isinstance(dim, AttrScalar):
        raw: tuple[object, ...] = (dim.value,)
    elif isinstance(dim, Const) and isinstance(dim.value, tuple):
        raw = dim.value
    elif isinstance(dim, Const):
        raw = (dim.value,)
    else:
        raise NotApplicable(f"{node.op} with dim {dim}")
    if not raw or not all(isinstance(d, int) and not isinstance(d, bool) for d in raw):
        raise NotApplicable(f"{node.op} over dim={raw}")
    return sorted({int(d) % rank for d in raw})  # type: ignore[call-overload]
