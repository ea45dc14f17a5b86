"""One fused Triton kernel (and its launcher) for a region of elementwise nodes.

The kernel walks the flattened output with a 1D grid (`BLOCK` elements per program, masked tail), loads every
operand once, widens it to fp32, evaluates the ops in order and stores the result. Operands of the output's
shape are read at the flat offset; broadcast operands (a per-channel bias `(C, 1, 1)` on an NCHW output, a
`(F,)` bias on `(B, F)`, a 0-d parameter) are read at `(offs // inner) % size`, with `inner`/`size` computed
by the launcher from the tensors' shapes at run time: nothing depends on the task's sizes.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass

from htam_graph.rules.base import KernelConfig, NotApplicable
from htam_graph.rules.codegen import template
from htam_graph.rules.codegen.triton_math import emit_op, render_literal
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpKind, OpNode, Ref, Value

__all__ = [
    "Leaf",
    "Region",
    "build_region",
    "forward_leaf_exprs",
    "operand_renderer",
    "kernel_source",
    "launcher_source",
    "region_body",
    "BROADCAST_LAYOUT_SOURCE",
    "prepare_operand",
]

_FLOAT_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")
# Names the generated kernels and launchers use for themselves (the elementwise, reduction and composed
# templates): an operand or scalar argument called so would shadow them (`self.r` against the row index `r`).
_RESERVED = set(
    "pid offs offs0 mask mask0 n_elements out_ptr out grid tl triton torch math BLOCK NUM_WARPS"
    " r r0 r_lanes r_start r_end m s m_j s_j j k d o v tile base cols col_mask keep keep_mask keep_base"
    " rows row_mask split n_split n_inner n_itiles n_keep n_red n_outer n_tiles out_offs part_offs acc"
    " acc_sq mean rstd diff shift value result size full_shape row_shape out_shape".split()
)

# Emitted once into every file with a broadcast operand: the launcher-side half of the index arithmetic.
BROADCAST_LAYOUT_SOURCE = '''\
def broadcast_layout(shape: torch.Size, out_shape: torch.Size) -> tuple[int, int]:
    """(inner, size) such that element i of the flat output reads element (i // inner) % size of the operand.

    Works when the operand's non-1 dimensions (right-aligned against the output) are one contiguous block of
    the output's dimensions: a per-channel (C, 1, 1) bias, a (F,) bias, a scalar tensor.
    """
    padded = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    dims = [d for d, s in enumerate(padded) if s != 1]
    if not dims:
        return 1, 1
    first, last = dims[0], dims[-1]
    if any(padded[d] != out_shape[d] for d in range(first, last + 1)):
        raise ValueError(f"operand shape {tuple(shape)} is not a contiguous block of {tuple(out_shape)}")
    return math.prod(out_shape[last + 1 :]), math.prod(padded[first : last + 1])
'''


@dataclass(frozen=True)
class Leaf:
    """A tensor operand of the fused kernel."""

    ref: str  # graph name
    arg: str  # identifier used for it in the launcher and the kernel
    expr: str  # how ModelNew.forward passes it (`x`, `self.bias`, the library output's variable)
    broadcast: bool  # False: it has the output's shape


@dataclass(frozen=True)
class Scalar:
    """A scalar kernel argument read from a module attribute at run time."""

    path: str  # attribute path relative to the model, e.g. divisor or leaky_relu.negative_slope
    arg: str
    expr: str  # e.g. float(self.divisor)


@dataclass(frozen=True)
class Region:
    """Elementwise nodes fused into one kernel."""

    leaves: tuple[Leaf, ...]
    scalars: tuple[Scalar, ...]
    nodes: tuple[OpNode, ...]
    output: str

    def describe(self) -> str:
        ops = [n.op for n in self.nodes]
        if len(ops) <= 8:
            return " -> ".join(ops)
        return " -> ".join(ops[:6]) + f" -> ... -> {ops[-1]} ({len(ops)} ops)"

    def call_args(self) -> list[str]:
        """The launcher's arguments in the forward: each leaf's expression, then each scalar's."""
        return [leaf.expr for leaf in self.leaves] + [s.expr for s in self.scalars]

    def reads_whole(self, ref: str) -> bool:
        """Whether the region reads the tensor `ref` at the output's shape (a leaf, not broadcast)."""
        return any(leaf.ref == ref and not leaf.broadcast for leaf in self.leaves)


def identifier(name: str, taken: set[str]) -> str:
    """A fresh Python identifier for a graph name (`conv.bias` -> `conv_bias`; a per-channel view such as
    `conv.bias.view(-1, 1, 1)`, see library_epilogue.fold_conv_bias -> `conv_bias_per_channel`)."""
    name = re.sub(r"\.view\([-\d, ]*\)$", "_per_channel", name)
    base = re.sub(r"\W", "_", name).strip("_") or "t"
    if base[0].isdigit() or keyword.iskeyword(base) or base in _RESERVED:
        base = f"t_{base}"
    candidate, i = base, 1
    while candidate in taken:
        i += 1
        candidate = f"{base}_{i}"
    taken.add(candidate)
    return candidate


def operand_renderer(
    tensors: dict[str, str] | Callable[[str], str], scalars: dict[str, str], where: str = ""
) -> Callable[[Value], str]:
    """How an op's operand reads in kernel code: a tensor by its variable in `tensors` (a dict read at call
    time, so variables added after this call are seen, or a function of the graph name for kernels that index
    or load some tensors specially), a scalar attribute by its argument, a number literally. Raises
    NotApplicable for anything else (`where` ends the reason, e.g. " before the norm")."""

    def render(value: Value) -> str:
        if isinstance(value, Ref):
            return tensors(value.name) if callable(tensors) else tensors[value.name]
        if isinstance(value, AttrScalar):
            return scalars[value.path]
        if (
            isinstance(value, Const)
            and isinstance(value.value, int | float)
            and not isinstance(value.value, bool)
        ):
            return render_literal(value.value)
        raise NotApplicable(f"unsupported operand {value}{where}")

    return render


def build_region(graph: OpGraph, nodes: tuple[OpNode, ...], leaf_exprs: dict[str, str]) -> Region:
    """Check that `nodes` form a fusable elementwise region ending at the graph output and describe it.

    `leaf_exprs` maps every tensor the region may read from outside (inputs, parameters, a library output) to
    the forward expression that produces it. Raises NotApplicable.
    """
    if not nodes:
        raise NotApplicable("no elementwise ops to fuse")
    inside = {n.name for n in nodes}
    out_node = nodes[-1]
    if graph.output.name != out_node.name:
        raise NotApplicable("the fused region does not end at the forward's output")
    _check_nodes(graph, nodes, inside)
    taken: set[str] = set()
    leaves: dict[str, Leaf] = {}
    scalars: dict[str, Scalar] = {}
    for node in nodes:
        for value in (*node.operands, *(v for _, v in node.params)):
            if isinstance(value, Ref) and value.name not in inside and value.name not in leaves:
                leaves[value.name] = _leaf(graph, value.name, leaf_exprs, out_node.shape, taken)
            elif isinstance(value, AttrScalar) and value.path not in scalars:
                scalars[value.path] = Scalar(
                    value.path, identifier(value.path, taken), f"float(self.{value.path})"
                )
    if not any(not leaf.broadcast for leaf in leaves.values()):
        raise NotApplicable("no operand has the output's shape (pure broadcasting is not fused)")
    return Region(tuple(leaves.values()), tuple(scalars.values()), nodes, out_node.name)


def forward_leaf_exprs(graph: OpGraph) -> dict[str, str]:
    """`build_region`'s `leaf_exprs` for what the forward reads as it is: each input by its name, each
    parameter or buffer as `self.<name>` (a recipe adds the outputs of the library calls it keeps)."""
    leaf_exprs = {info.name: info.name for info in graph.inputs}
    leaf_exprs.update({info.name: f"self.{info.name}" for info in graph.attrs})
    return leaf_exprs


def _check_nodes(graph: OpGraph, nodes: tuple[OpNode, ...], inside: set[str]) -> None:
    for node in nodes:
        if node.kind is not OpKind.ELEMENTWISE:
            raise NotApplicable(f"{node.op} ({node.origin}) is not elementwise")
        if node.dtype and node.dtype not in _FLOAT_DTYPES and node is nodes[-1]:
            raise NotApplicable(f"the output dtype {node.dtype} is not a float")
        if node is not nodes[-1] and any(u.name not in inside for u in graph.users(node.name)):
            raise NotApplicable(f"{node.name} is also used outside the fused region")


def _leaf(
    graph: OpGraph, name: str, leaf_exprs: dict[str, str], out_shape: tuple[int, ...], taken: set[str]
) -> Leaf:
    if name not in leaf_exprs:
        raise NotApplicable(f"{name} is computed outside the fusable region")
    shape = graph.shape_of(name)
    info = graph.tensor(name)
    node = graph.node(name)
    dtype = info.dtype if info is not None else (node.dtype if node is not None else "")
    if dtype not in _FLOAT_DTYPES:
        raise NotApplicable(f"operand {name} has dtype {dtype}; only float tensors are fused")
    if len(shape) > len(out_shape):
        raise NotApplicable(f"operand {name} has more dimensions than the output")
    padded = (1,) * (len(out_shape) - len(shape)) + shape
    dims = [d for d, s in enumerate(padded) if s != 1]
    if dims and any(padded[d] != out_shape[d] for d in range(dims[0], dims[-1] + 1)):
        raise NotApplicable(
            f"operand {name}{list(shape)} does not broadcast as one block onto {list(out_shape)}"
        )
    return Leaf(name, identifier(name, taken), leaf_exprs[name], shape != out_shape)


# ------------------------------------------------------------------------------------------- emission
# One program: BLOCK consecutive elements of the flat output, every operand loaded once, the ops in fp32.
_KERNEL = '''\
@triton.jit
def $name(
    $params
):
    """Fused $describe: one program computes BLOCK consecutive output elements in fp32."""
    pid = tl.program_id(0)
    if INDEX_64:  # more than 2**31 elements: 64-bit offsets
        pid = pid.to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    $vector_hints
    mask = offs < n_elements
    # operands, each loaded once and widened to fp32
    $loads
    $body
'''

_VECTOR_HINTS = "offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)  # contiguous: vector loads"


def kernel_source(region: Region, kernel_name: str, config: KernelConfig) -> tuple[str, frozenset[str]]:
    """The @triton.jit kernel text and the helper names it calls."""
    vars_: dict[str, str] = {leaf.ref: leaf.arg for leaf in region.leaves}
    scalar_args = {s.path: s.arg for s in region.scalars}
    render = operand_renderer(vars_, scalar_args)
    params = [f"{leaf.arg}_ptr" for leaf in region.leaves] + ["out_ptr", "n_elements"]
    params += [f"{leaf.arg}_inner, {leaf.arg}_size" for leaf in region.leaves if leaf.broadcast]
    params += [s.arg for s in region.scalars] + ["BLOCK: tl.constexpr", "INDEX_64: tl.constexpr"]
    loads = [_flat_load(leaf) for leaf in region.leaves]
    body, helpers = region_body(region, render, vars_, scalar_args, "offs")
    text = template.fill(
        _KERNEL,
        name=kernel_name,
        params=[f"{p}," for p in params],
        describe=region.describe(),
        vector_hints=_VECTOR_HINTS if config.vector_hints else "",
        loads=loads,
        body=body,
    )
    return text, helpers


def _flat_load(leaf: Leaf) -> str:
    index = f"(offs // {leaf.arg}_inner) % {leaf.arg}_size" if leaf.broadcast else "offs"
    return f"{leaf.arg} = tl.load({leaf.arg}_ptr + {index}, mask=mask, other=0.0).to(tl.float32)"


def region_body(
    region: Region,
    render: Callable[[Value], str],
    vars_: dict[str, str],
    scalar_args: dict[str, str],
    out_index: str,
) -> tuple[list[str], frozenset[str]]:
    """The kernel lines that evaluate every node of `region` in fp32 (a comment naming each op, then
    `v_<name> = ...`, names recorded in `vars_`) and store the output at `out_ptr + out_index` under `mask`;
    with the helper names the expressions call. The lines are unindented: the kernel's template places them.
    Shared by every kernel that ends in an elementwise region."""
    lines: list[str] = []
    helpers: set[str] = set()
    for node in region.nodes:
        emitted = emit_op(node, render)
        helpers |= emitted.helpers
        var = identifier(f"v_{node.name}", set(vars_.values()) | set(scalar_args.values()))
        vars_[node.name] = var
        lines.append(f"# {node.op}  ({node.origin})")
        lines.append(f"{var} = {emitted.expr}")
    result = vars_[region.output]
    lines.append(f"tl.store(out_ptr + {out_index}, {result}.to(out_ptr.dtype.element_ty), mask=mask)")
    return lines, frozenset(helpers)


# The launcher: operands checked against the broadcast output shape, the output, one launch over it.
_LAUNCHER = '''\
def $name($signature) -> torch.Tensor:
    """Launch $kernel over the broadcast shape of the operands (sizes read at run time)."""
    out_shape = torch.broadcast_shapes($shapes)
    $operands
    out = torch.empty(out_shape, device=$first.device, dtype=$first.dtype)
    n_elements = out.numel()
    if n_elements == 0:
        return out
    grid = (triton.cdiv(n_elements, $block),)
    $kernel[grid](
        $args,
        BLOCK=$block,
        INDEX_64=n_elements + $block > 2**31 - 1,
        num_warps=$warps,
    )
    return out
'''

_FULL_SHAPE_CHECK = """\
if $arg.shape != out_shape:
    raise ValueError(f"$arg has shape {tuple($arg.shape)}, expected {tuple(out_shape)}")
"""


def launcher_source(region: Region, launcher_name: str, kernel_name: str, config: KernelConfig) -> str:
    """The Python function that allocates the output, computes the broadcast layouts and launches the
    kernel."""
    tensors = [leaf.arg for leaf in region.leaves]
    args = [*tensors, "out", "n_elements"]
    args += [f"{leaf.arg}_inner, {leaf.arg}_size" for leaf in region.leaves if leaf.broadcast]
    args += [s.arg for s in region.scalars]
    return template.fill(
        _LAUNCHER,
        name=launcher_name,
        signature=", ".join(
            [f"{t}: torch.Tensor" for t in tensors] + [f"{s.arg}: float" for s in region.scalars]
        ),
        kernel=kernel_name,
        shapes=", ".join(t + ".shape" for t in tensors),
        operands=[line for leaf in region.leaves for line in prepare_operand(leaf)],
        first=next(leaf.arg for leaf in region.leaves if not leaf.broadcast),
        block=_block_name(kernel_name),
        args=", ".join(args),
        warps=_warps_name(kernel_name),
    )


def prepare_operand(
    leaf: Leaf,
    per_channel: frozenset[str] = frozenset(),
    per_channel_check: str = "",
    *,
    contiguous: bool = True,
) -> list[str]:
    """A launcher's lines for one operand: its full-shape check (not for a broadcast one), a contiguous copy
    (unless `contiguous` is False: an operand whose layout the kernel reads as it is), then
    `per_channel_check` (a template over `$arg`) for an operand in `per_channel`, or the `broadcast_layout`
    of another broadcast one."""
    lines = [] if leaf.broadcast else [template.fill(_FULL_SHAPE_CHECK, arg=leaf.arg)]
    if contiguous:
        lines.append(f"{leaf.arg} = {leaf.arg}.contiguous()")
    if leaf.ref in per_channel:
        lines.append(template.fill(per_channel_check, arg=leaf.arg))
    elif leaf.broadcast:
        lines.append(f"{leaf.arg}_inner, {leaf.arg}_size = broadcast_layout({leaf.arg}.shape, out_shape)")
    return lines


def launch_constants(kernel_name: str, config: KernelConfig) -> list[str]:
    """Module-level constants the launcher reads (what a tuning recipe changes)."""
    return [
        f"{_block_name(kernel_name)} = {config.block}  # output elements per program",
        f"{_warps_name(kernel_name)} = {config.num_warps}",
    ]


def kernel_stem(kernel_name: str) -> str:
    """The suffix of a kernel's module-level constants: `foo_kernel` -> `FOO` (BLOCK_FOO, NUM_WARPS_FOO)."""
    return kernel_name.upper().removesuffix("_KERNEL")


def _block_name(kernel_name: str) -> str:
    return "BLOCK_" + kernel_stem(kernel_name)


def _warps_name(kernel_name: str) -> str:
    return "NUM_WARPS_" + kernel_stem(kernel_name)


def uses_broadcast(region: Region) -> bool:
    return any(leaf.broadcast for leaf in region.leaves)


def flat_broadcast(leaf: Leaf, per_channel: frozenset[str]) -> bool:
    """A broadcast leaf that a kernel reads through `(flat_index // inner) % size` (broadcast_layout), not
    as a per-channel vector."""
    return leaf.broadcast and leaf.ref not in per_channel


def uses_flat_broadcast(region: Region, per_channel: frozenset[str]) -> bool:
    """Whether some leaf of `region` is a `flat_broadcast` one (the file then needs `broadcast_layout`)."""
    return any(flat_broadcast(leaf, per_channel) for leaf in region.leaves)


def layout_params(leaf: Leaf) -> str:
    """The kernel parameters (and launcher arguments) carrying a flat broadcast leaf's layout."""
    return f"{leaf.arg}_inner, {leaf.arg}_size"
