"""The Python launcher of the tiled reduction kernel (kernel.py) and the ModelNew.forward call to it.

The launcher reads the [outer, reduced, inner] view of the input at run time (reduction_layout, or the norm's
own rows), checks the operand shapes, decides the split of long reductions, and launches phase 0 (partial
states) when split, then phase 1.
"""

from __future__ import annotations

from htam_graph.rules.codegen import template
from htam_graph.rules.ops import AttrScalar, Const, OpKind, OpNode, Ref, number
from htam_graph.rules.recipes.reduce.plan import BFULL, BOUT, FULL, OUT, Leaf, ReducePlan, reduce_dims, stem
from htam_graph.rules.recipes.reduce.rows import rows_launch, uses_rows_kernel
from htam_graph.rules.recipes.reduce.statistics import STATES

__all__ = ["BROADCAST_LAYOUT_SOURCE", "REDUCTION_LAYOUT_SOURCE", "launcher_call", "launcher_source"]

REDUCTION_LAYOUT_SOURCE = '''\
def reduction_layout(shape: torch.Size, dims: int | tuple[int, ...]) -> tuple[int, int, int]:
    """(outer, reduced, inner) extents of a contiguous tensor reduced over `dims` (which must be adjacent)."""
    dims = sorted(d % len(shape) for d in ((dims,) if isinstance(dims, int) else dims))
    if dims != list(range(dims[0], dims[-1] + 1)):
        raise ValueError(f"reducing over non-adjacent dims {dims} is not supported")
    return math.prod(shape[: dims[0]]), math.prod(shape[dims[0] : dims[-1] + 1]), \
math.prod(shape[dims[-1] + 1 :])
'''

BROADCAST_LAYOUT_SOURCE = '''\
def broadcast_layout(shape: torch.Size, out_shape: torch.Size) -> tuple[int, int]:
    """(inner, size) such that flat element i of a tensor of `out_shape` reads element (i // inner) % size."""
    padded = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    dims = [d for d, s in enumerate(padded) if s != 1]
    if not dims:
        return 1, 1
    first, last = dims[0], dims[-1]
    if any(padded[d] != out_shape[d] for d in range(first, last + 1)):
        raise ValueError(f"operand shape {tuple(shape)} is not a contiguous block of {tuple(out_shape)}")
    return math.prod(out_shape[last + 1 :]), math.prod(padded[first : last + 1])
'''


# The launcher: operand checks, the [outer, reduced, inner] view, the output, the short-row branch (norms),
# the tile shape and the split of long reductions across programs, phase 0 (split only) then phase 1.
_LAUNCHER = '''\
def $name($signature) -> torch.Tensor:
    """Launch $kernel: sizes, strides of the [outer, reduced, inner] view and the split read at run time."""
    full_shape = torch.broadcast_shapes($full_shapes)
    $full_operands
    $layout
    $out_operands
    out = torch.empty(out_shape, device=$first.device, dtype=$out_dtype)
    if out.numel() == 0 or n_red == 0:
        return out
    $rows
    block_i = 1 if n_inner == 1 else min(triton.next_power_of_2(n_inner), MAX_BLOCK_I)
    block_r = max(1, min(BLOCK // block_i, triton.next_power_of_2(n_red)))
    n_itiles = triton.cdiv(n_inner, block_i)
    n_tiles = n_outer * n_itiles
    # few long reductions: split each across programs so the whole GPU works (partials merged after)
    n_split = 1
    if n_tiles < SPLIT_TARGET_PROGRAMS:
        n_split = max(1, min(triton.cdiv(SPLIT_TARGET_PROGRAMS, n_tiles), \
n_red // (block_r * MIN_TILES_PER_SPLIT)))
    red_per_split = triton.cdiv(triton.cdiv(n_red, n_split), block_r) * block_r
    n_split = triton.cdiv(n_red, red_per_split)
    $partials
    if n_split > 1:
        $kernel[(n_tiles * n_split,)](
            $tensors, n_red, n_inner, n_itiles, n_split, n_split, red_per_split$tail,
            BLOCK_R=block_r, BLOCK_I=block_i, num_warps=NUM_WARPS, PHASE=0, USE_PARTIALS=True,
        )
    grid_split = $phase1_split
    $kernel[(n_tiles * grid_split,)](
        $tensors, n_red, n_inner, n_itiles, grid_split, n_split, red_per_split$tail,
        BLOCK_R=block_r, BLOCK_I=block_i, num_warps=NUM_WARPS, PHASE=1, USE_PARTIALS=n_split > 1,
    )
    return out
'''

_SHAPE_CHECK = """\
if $arg.shape != $shape:
    raise ValueError(f"$arg has shape {tuple($arg.shape)}, expected {tuple($shape)}")
"""


def launcher_source(plan: ReducePlan, stat: str, kernel_name: str, launcher_name: str) -> str:
    """The launcher of the tiled kernel: the [outer, reduced, inner] view, the split, phase 0 then phase 1."""
    reducer = plan.reducer
    tensors = [lf.arg for lf in plan.leaves]
    signature = [f"{t}: torch.Tensor" for t in tensors] + [f"{s.arg}: float" for s in plan.scalars]
    full = [lf.arg for lf in plan.leaves if lf.space in (FULL, BFULL) and not _is_affine(plan, lf.ref)]
    first = next(lf.arg for lf in plan.leaves if lf.space == FULL)
    states = STATES[stat]
    dtype_of = {"tl.float32": "torch.float32", "tl.int32": "torch.int32"}
    bcast = [f"{lf.arg}_inner, {lf.arg}_size" for lf in plan.leaves if lf.space in (BFULL, BOUT)]
    scalar_args = [s.arg for s in plan.scalars] + (["eps"] if reducer.kind is OpKind.NORM else [])
    return template.fill(
        _LAUNCHER,
        name=launcher_name,
        signature=", ".join(signature + _layout_args(reducer)),
        kernel=kernel_name,
        full_shapes=", ".join(t + ".shape" for t in full),
        full_operands=[line for leaf in plan.leaves for line in _full_operand(leaf)],
        layout=_layout_lines(plan),
        out_operands=[line for leaf in plan.leaves for line in _out_operand(leaf)],
        first=first,
        out_dtype="torch.int64" if reducer.op in ("argmax", "argmin") else f"{first}.dtype",
        rows=rows_launch(plan, f"{stem(plan)}_rows_kernel") if uses_rows_kernel(plan) else "",
        partials=[
            f"part_{s} = torch.empty(n_outer * n_inner * n_split if n_split > 1 else 1, "
            f"device={first}.device, dtype={dtype_of[dt]})"
            for s, _, dt in states
        ],
        tensors=", ".join([*tensors, "out", *(f"part_{s}" for s, _, _ in states)]),
        tail="".join(f", {a}" for a in [*bcast, *scalar_args]),
        phase1_split="n_split" if plan.mode == "normalise" else "1",
    )


def _full_operand(leaf: Leaf) -> list[str]:
    """An operand of the input's shape is checked against it; every operand is made contiguous."""
    check = [template.fill(_SHAPE_CHECK, arg=leaf.arg, shape="full_shape")] if leaf.space == FULL else []
    return [*check, f"{leaf.arg} = {leaf.arg}.contiguous()"]


def _out_operand(leaf: Leaf) -> list[str]:
    """A broadcast operand's layout against the input (BFULL) or the reduction's result (BOUT, read per
    result at `out_offs` also when the output is the input's shape); a result-shaped operand's check."""
    if leaf.space == BFULL:
        return [f"{leaf.arg}_inner, {leaf.arg}_size = broadcast_layout({leaf.arg}.shape, full_shape)"]
    if leaf.space == BOUT:
        return [f"{leaf.arg}_inner, {leaf.arg}_size = broadcast_layout({leaf.arg}.shape, red_shape)"]
    if leaf.space == OUT:
        return [template.fill(_SHAPE_CHECK, arg=leaf.arg, shape="red_shape")]
    return []


def _is_affine(plan: ReducePlan, ref: str) -> bool:
    return plan.reducer.kind is OpKind.NORM and any(
        isinstance(v, Ref) and v.name == ref for v in plan.reducer.operands[1:]
    )


def _layout_args(reducer: OpNode) -> list[str]:
    if reducer.kind is OpKind.NORM:
        args = ["eps: float"]
        if reducer.op in ("nn_layer_norm", "layer_norm"):
            args.append("normalized_shape: tuple[int, ...]")
        if reducer.op == "nn_group_norm":
            args.append("num_groups: int")
        return args
    args = ["dim: int | tuple[int, ...]"]
    return args


# The [outer, reduced, inner] view and the output shape of each norm module.
_LAYER_NORM_LAYOUT = """\
k = len(normalized_shape)
if tuple(full_shape[-k:]) != tuple(normalized_shape):
    raise ValueError(f"input shape {tuple(full_shape)} does not end with {tuple(normalized_shape)}")
n_red, n_inner = math.prod(normalized_shape), 1
n_outer = math.prod(full_shape) // n_red
out_shape = full_shape
"""

_GROUP_NORM_LAYOUT = """\
if full_shape[1] % num_groups:
    raise ValueError(f"{full_shape[1]} channels do not split into {num_groups} groups")
n_outer, n_inner = full_shape[0] * num_groups, 1  # each (sample, group) is one contiguous row
n_red = math.prod(full_shape) // n_outer if n_outer else 0
out_shape = full_shape
"""

_INSTANCE_NORM_LAYOUT = """\
n_outer, n_red, n_inner = full_shape[0] * full_shape[1], math.prod(full_shape[2:]), 1
out_shape = full_shape  # each (sample, channel) plane is one contiguous row
"""

_NORM_LAYOUTS = {
    "nn_layer_norm": _LAYER_NORM_LAYOUT,
    "layer_norm": _LAYER_NORM_LAYOUT,
    "nn_group_norm": _GROUP_NORM_LAYOUT,
    "nn_instance_norm": _INSTANCE_NORM_LAYOUT,
}


def _layout_lines(plan: ReducePlan) -> list[str]:
    """The view's extents (n_outer, n_red, n_inner), `red_shape` (the reduction's own result: the dims `dim`
    of the input dropped, or kept as size 1 with keepdim) and `out_shape`: a norm's own rows, the input's
    shape when the result is broadcast back over it (softmax, normalise mode), else `red_shape`."""
    reducer = plan.reducer
    if reducer.op in _NORM_LAYOUTS:
        return [_NORM_LAYOUTS[reducer.op]]
    lines = ["n_outer, n_red, n_inner = reduction_layout(full_shape, dim)"]
    if reducer.kind is OpKind.SOFTMAX:
        return [*lines, "out_shape = full_shape"]
    lines.append("dims = {d % len(full_shape) for d in ((dim,) if isinstance(dim, int) else dim)}")
    if reducer.param("keepdim") == Const(True):
        lines.append("red_shape = torch.Size(1 if d in dims else s for d, s in enumerate(full_shape))")
    else:
        lines.append("red_shape = torch.Size(s for d, s in enumerate(full_shape) if d not in dims)")
    return [*lines, "out_shape = full_shape" if plan.mode == "normalise" else "out_shape = red_shape"]


def launcher_call(plan: ReducePlan) -> tuple[list[str], list[str]]:
    """(call arguments, guard lines) for ModelNew.forward."""
    reducer = plan.reducer
    args = [lf.expr for lf in plan.leaves] + [s.expr for s in plan.scalars]
    if reducer.op == "layer_norm":
        return [*args, *_functional_layer_norm_args(plan)], []
    if reducer.kind is OpKind.NORM:
        path = reducer.module_path
        eps = reducer.param("eps")
        args.append(f"float(self.{path}.eps)" if isinstance(eps, AttrScalar) else repr(eps))
        if reducer.op == "nn_layer_norm":
            args.append(f"tuple(self.{path}.normalized_shape)")
        if reducer.op == "nn_group_norm":
            args.append(f"self.{path}.num_groups")
        return args, []
    if reducer.kind is OpKind.SOFTMAX and reducer.module_path is not None:
        args.append(f"self.{reducer.module_path}.dim")
        return args, []
    expr, _ = reduce_dims(reducer)
    args.append(expr)
    return args, []


def _functional_layer_norm_args(plan: ReducePlan) -> list[str]:
    """eps and normalized_shape of `F.layer_norm`: torch requires weight.shape == bias.shape ==
    normalized_shape, so an affine operand gives it at run time (the forward may compute it from sizes)."""
    reducer = plan.reducer
    eps = reducer.param("eps")
    args = [f"float(self.{eps.path})" if isinstance(eps, AttrScalar) else repr(number(eps))]
    exprs = {lf.ref: lf.expr for lf in plan.leaves}
    affine = [v.name for v in reducer.operands[1:] if isinstance(v, Ref)]
    if affine:
        args.append(f"tuple({exprs[affine[0]]}.shape)")
    else:
        args.append(repr(reducer.param("normalized_shape").value))  # type: ignore[union-attr]
    return args
