"""Triton source for a `ReducePlan`: one tiled kernel over the [outer, reduced, inner] view of the input.

Each program owns one `outer` index and BLOCK_I consecutive `inner` columns and walks the reduced extent in
[BLOCK_R, BLOCK_I] tiles (inner == 1: one contiguous row, BLOCK_I == 1; inner > 1: coalesced columns). Loop 1
evaluates the prologue per element and folds it into a per-lane state (sum, product, max/min, (value, index),
Welford (mean, M2, count), online (max, sum of exp)); the lanes are merged with the state's combine function.
Reduce mode applies the epilogue to the per-column result and stores it; normalise mode runs loop 2 over the
same tiles, recomputes the prologue and writes the normalised / combined values.

When there are few (outer, column-tile) pairs and long reductions, PHASE 0 programs each fold one slice of the
reduced extent into a partial state (fp32 buffers), and the PHASE 1 kernel merges the partials with the same
combine function (Chan's formula for Welford): the split reduction of `parallelism.split_reduction`.
"""

from __future__ import annotations

from htam_graph.rules.base import KernelConfig, NotApplicable
from htam_graph.rules.codegen.fused_elementwise import identifier
from htam_graph.rules.ops import AttrScalar, Const, OpKind, OpNode, Ref, Value, number
from htam_graph.rules.recipes.reduce.emit import ancestors as _ancestors
from htam_graph.rules.recipes.reduce.emit import emit_node as _emit
from htam_graph.rules.recipes.reduce.emit import emit_nodes
from htam_graph.rules.recipes.reduce.emit import indent as _indent
from htam_graph.rules.recipes.reduce.emit import refs as _refs
from htam_graph.rules.recipes.reduce.plan import BFULL, BOUT, FULL, OUT, Leaf, ReducePlan, reduce_dims, stem
from htam_graph.rules.recipes.reduce.rows import (
    OPERAND_MODE_SOURCE,
    SHORT_ROW_CONSTANT,
    rows_kernel,
    rows_launch_lines,
    uses_rows_kernel,
)

__all__ = ["KernelSource", "reduction_source"]

# Per statistic: state components (name, init value, dtype), the lane update and the combine function.
_STATES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "sum": (("acc", "0.0", "tl.float32"),),
    "prod": (("acc", "1.0", "tl.float32"),),
    "max": (("acc", '-float("inf")', "tl.float32"),),
    "min": (("acc", 'float("inf")', "tl.float32"),),
    "argmax": (("best", "0.0", "tl.float32"), ("idx", "-1", "tl.int32")),
    "argmin": (("best", "0.0", "tl.float32"), ("idx", "-1", "tl.int32")),
    "welford": (("mean", "0.0", "tl.float32"), ("m2", "0.0", "tl.float32"), ("cnt", "0.0", "tl.float32")),
    "lse": (("m", '-float("inf")', "tl.float32"), ("s", "0.0", "tl.float32")),
}
_UPDATES: dict[str, str] = {
    "sum": "acc += tl.where(mask, v, 0.0)",
    "prod": "acc *= tl.where(mask, v, 1.0)",
    "max": 'acc = tl.maximum(acc, tl.where(mask, v, -float("inf")))',
    "min": 'acc = tl.minimum(acc, tl.where(mask, v, float("inf")))',
    "argmax": (
        "better = mask & ((v > best) | (idx < 0))  # strict: the first index wins within a lane\n"
        "best = tl.where(better, v, best)\n"
        "idx = tl.where(better, r_idx, idx)"
    ),
    "argmin": (
        "better = mask & ((v < best) | (idx < 0))  # strict: the first index wins within a lane\n"
        "best = tl.where(better, v, best)\n"
        "idx = tl.where(better, r_idx, idx)"
    ),
    "welford": (
        "cnt += tl.where(mask, 1.0, 0.0)\n"
        "delta = v - mean\n"
        "mean += tl.where(mask, delta / tl.maximum(cnt, 1.0), 0.0)\n"
        "m2 += tl.where(mask, delta * (v - mean), 0.0)"
    ),
    "lse": (
        'v_m = tl.where(mask, v, -float("inf"))\n'
        "m_new = tl.maximum(m, v_m)\n"
        "# a lane that has seen only -inf subtracts 0 instead of -inf (no inf - inf = NaN); its s stays 0\n"
        'm_ref = tl.where(m_new == -float("inf"), 0.0, m_new)\n'
        "s = s * tl.exp(m - m_ref) + tl.exp(v_m - m_ref)\n"
        "m = m_new"
    ),
}
_COMBINES: dict[str, str] = {
    "sum": "def _combine_sum(a, b):\n    return a + b\n",
    "prod": "def _combine_prod(a, b):\n    return a * b\n",
    "max": "def _combine_max(a, b):\n    return tl.maximum(a, b)\n",
    "min": "def _combine_min(a, b):\n    return tl.minimum(a, b)\n",
    "argmax": (
        "def _combine_argmax(va, ia, vb, ib):\n"
        "    # the larger value; on ties the lower index (as PyTorch); idx < 0 marks an empty state\n"
        "    take_b = (ia < 0) | ((ib >= 0) & ((vb > va) | ((vb == va) & (ib < ia))))\n"
        "    return tl.where(take_b, vb, va), tl.where(take_b, ib, ia)\n"
    ),
    "argmin": (
        "def _combine_argmin(va, ia, vb, ib):\n"
        "    # the smaller value; on ties the lower index (as PyTorch); idx < 0 marks an empty state\n"
        "    take_b = (ia < 0) | ((ib >= 0) & ((vb < va) | ((vb == va) & (ib < ia))))\n"
        "    return tl.where(take_b, vb, va), tl.where(take_b, ib, ia)\n"
    ),
    "welford": (
        "def _combine_welford(mean_a, m2_a, n_a, mean_b, m2_b, n_b):\n"
        "    # Chan et al.'s parallel formula; empty states (n == 0) contribute nothing\n"
        "    n = n_a + n_b\n"
        "    w_b = tl.where(n == 0.0, 0.0, n_b / tl.where(n == 0.0, 1.0, n))\n"
        "    delta = mean_b - mean_a\n"
        "    return mean_a + delta * w_b, m2_a + m2_b + delta * delta * n_a * w_b, n\n"
    ),
    "lse": (
        "def _combine_lse(m_a, s_a, m_b, s_b):\n"
        "    # merge two (running max, sum of exp(x - max)) pairs; all -inf pairs stay (-inf, 0)\n"
        "    m = tl.maximum(m_a, m_b)\n"
        '    m_ref = tl.where(m == -float("inf"), 0.0, m)\n'
        "    return m, s_a * tl.exp(m_a - m_ref) + s_b * tl.exp(m_b - m_ref)\n"
    ),
}
_STAT_OF = {
    "sum": "sum",
    "mean": "sum",
    "prod": "prod",
    "amax": "max",
    "amin": "min",
    "argmax": "argmax",
    "argmin": "argmin",
    "logsumexp": "lse",
    "softmax": "lse",
    "log_softmax": "lse",
    "nn_layer_norm": "welford",
    "layer_norm": "welford",  # F.layer_norm (no module)
    "nn_group_norm": "welford",
    "nn_instance_norm": "welford",
}

REDUCTION_LAYOUT_SOURCE = '''def reduction_layout(shape: torch.Size, dims: int | tuple[int, ...]) -> tuple[int, int, int]:
    """(outer, reduced, inner) extents of a contiguous tensor reduced over `dims` (which must be adjacent)."""
    dims = sorted(d % len(shape) for d in ((dims,) if isinstance(dims, int) else dims))
    if dims != list(range(dims[0], dims[-1] + 1)):
        raise ValueError(f"reducing over non-adjacent dims {dims} is not supported")
    return math.prod(shape[: dims[0]]), math.prod(shape[dims[0] : dims[-1] + 1]), math.prod(shape[dims[-1] + 1 :])
'''

BROADCAST_LAYOUT_SOURCE = '''def broadcast_layout(shape: torch.Size, out_shape: torch.Size) -> tuple[int, int]:
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


class KernelSource:
    """The generated pieces: kernel text, helper names, launcher text, plain-Python helpers, constants."""

    def __init__(
        self,
        kernel: str,
        helpers: set[str],
        combine: str,
        launcher: str,
        constants: list[str],
        extra: tuple[str, ...] = (),
    ) -> None:
        self.kernel = kernel
        self.helpers = helpers
        self.combine = combine
        self.launcher = launcher
        self.constants = constants
        self.extra = (REDUCTION_LAYOUT_SOURCE, BROADCAST_LAYOUT_SOURCE, *extra)


def reduction_source(plan: ReducePlan, config: KernelConfig) -> tuple[KernelSource, str, str]:
    """(pieces, kernel name, launcher name) for the plan."""
    name = stem(plan)
    kernel_name, launcher_name = f"{name}_kernel", f"fused_{name}"
    stat = _STAT_OF.get(plan.reducer.op)
    if stat is None:
        raise NotApplicable(f"no kernel statistic for {plan.reducer.op}")
    kernel, helpers = _kernel(plan, stat, kernel_name)
    rows = uses_rows_kernel(plan)
    if rows:  # norms: a second kernel for short rows, several whole rows per program (rows.py)
        kernel = rows_kernel(plan, f"{name}_rows_kernel", helpers) + "\n\n" + kernel
    combine = "@triton.jit\n" + _COMBINES[stat]
    constants = [
        f"BLOCK = {config.block}  # elements per [BLOCK_R, BLOCK_I] tile",
        f"NUM_WARPS = {config.num_warps}",
        "MAX_BLOCK_I = 64  # widest column tile when the reduced dims are not the innermost",
        f"SPLIT_TARGET_PROGRAMS = {max(config.max_single_block // 16, 64)}"
        "  # fewer (outer, column-tile) programs than this: split the reduction",
        "MIN_TILES_PER_SPLIT = 4  # each split program folds at least this many tiles",
    ]
    if rows:
        constants.append(SHORT_ROW_CONSTANT)
    launcher = _launcher(plan, stat, kernel_name, launcher_name)
    extra = (OPERAND_MODE_SOURCE,) if rows else ()
    return (
        KernelSource(kernel, helpers, combine, launcher, constants, extra),
        kernel_name,
        launcher_name,
    )


# ------------------------------------------------------------------------------------------- kernel
def _kernel(plan: ReducePlan, stat: str, kernel_name: str) -> tuple[str, set[str]]:
    states = _STATES[stat]
    state_names = [s for s, _, _ in states]
    helpers: set[str] = set()
    full_leaves = [lf for lf in plan.leaves if lf.space in (FULL, BFULL)]
    out_leaves = [lf for lf in plan.leaves if lf.space in (OUT, BOUT)]
    params = [f"{lf.arg}_ptr" for lf in plan.leaves] + ["out_ptr"]
    params += [f"part_{s}_ptr" for s in state_names]
    params += ["n_red", "n_inner", "n_itiles", "grid_split", "n_split", "red_per_split"]
    params += [f"{lf.arg}_inner, {lf.arg}_size" for lf in plan.leaves if lf.space in (BFULL, BOUT)]
    params += [s.arg for s in plan.scalars]
    if plan.reducer.kind is OpKind.NORM:
        params.append("eps")
    params += [
        "BLOCK_R: tl.constexpr",
        "BLOCK_I: tl.constexpr",
        "PHASE: tl.constexpr",
        "USE_PARTIALS: tl.constexpr",
    ]
    lines = [
        "@triton.jit",
        f"def {kernel_name}(",
        *(f"    {p}," for p in params),
        "):",
        f'    """{plan.describe()}: one program per (outer index, BLOCK_I columns[, slice of the reduction])."""',
        "    pid = tl.program_id(0)",
        "    tile = pid // grid_split",
        "    split = pid % grid_split",
        "    o = (tile // n_itiles).to(tl.int64)",
        "    cols = (tile % n_itiles) * BLOCK_I + tl.arange(0, BLOCK_I)",
        "    col_mask = cols < n_inner",
        "    base = o * n_red * n_inner",
        "    out_offs = o * n_inner + cols  # the reduced result's flat offsets (keepdim or not)",
        "    part_offs = out_offs * n_split  # partial states: n_split per result element",
        "    r_lanes = tl.arange(0, BLOCK_R)",
        "    r_start = split * red_per_split",
        "    r_end = tl.minimum(r_start + red_per_split, n_red)",
    ]
    fold = _fold_loop(plan, stat, full_leaves, helpers)
    store_partials = [
        f"        tl.store(part_{s}_ptr + part_offs + split, {s}, mask=col_mask)" for s in state_names
    ]
    lines += [
        "    if PHASE == 0:  # split reduction, first pass: this program's slice -> partial state",
        *_indent(fold, 2),
        *store_partials,
        "    else:",
    ]
    merge = [
        "if USE_PARTIALS:  # merge the partial states of every slice of this column tile",
        *(
            f"    {s} = tl.load(part_{s}_ptr + part_offs, mask=col_mask, other={init})"
            for s, init, _ in states
        ),
        "    for j in range(1, n_split):",
        *(
            f"        {s}_j = tl.load(part_{s}_ptr + part_offs + j, mask=col_mask, other={init})"
            for s, init, _ in states
        ),
        f"        {', '.join(state_names)} = _combine_{stat}({', '.join(state_names)}, {', '.join(s + '_j' for s in state_names)})",
        "else:",
        *_indent(fold, 1),
    ]
    lines += _indent(merge, 2)
    lines += _indent(_finish(plan, stat, out_leaves, full_leaves, helpers), 2)
    return "\n".join(lines) + "\n", helpers


def _fold_loop(plan: ReducePlan, stat: str, full_leaves: list[Leaf], helpers: set[str]) -> list[str]:
    """Loop 1 over this program's slice: prologue per element, folded into per-lane states, lanes merged."""
    states = _STATES[stat]
    lines = [f"{s} = tl.full([BLOCK_R, BLOCK_I], {init}, {dtype})" for s, init, dtype in states]
    lines += [
        "for r0 in range(r_start, r_end, BLOCK_R):",
        "    r = r0 + r_lanes",
        "    offs = base + r[:, None].to(tl.int64) * n_inner + cols[None, :]",
        "    mask = (r[:, None] < r_end) & col_mask[None, :]",
    ]
    if stat in ("argmax", "argmin"):
        lines.append("    r_idx = r[:, None] + tl.zeros([BLOCK_R, BLOCK_I], tl.int32)")
    needed = _ancestors(plan, {plan.reducer.operands[0].name})  # type: ignore[union-attr]
    body, value = _elementwise_body(
        plan, [n for n in plan.pre if n.name in needed], full_leaves, helpers, plan.reducer.operands[0]
    )
    lines += _indent(body, 1)
    lines.append(f"    v = {value}")
    lines += _indent(_UPDATES[stat].splitlines(), 1)
    names = ", ".join(s for s, _, _ in states)
    lines.append(
        f"{names} = tl.reduce(({names}), 0, _combine_{stat})  # merge the BLOCK_R lanes of each column"
    )
    return lines


def _finish(
    plan: ReducePlan, stat: str, out_leaves: list[Leaf], full_leaves: list[Leaf], helpers: set[str]
) -> list[str]:
    """After the per-column state is known: the result, the ops on it, then the store (reduce mode) or
    loop 2 over this program's slice writing every element (normalise mode)."""
    reducer = plan.reducer
    lines: list[str] = []
    vars_: dict[str, str] = {}
    if reducer.kind is OpKind.REDUCTION:
        lines.append(f"result = {_reduced_value(reducer.op)}")
        lines.append(
            "result = tl.where(col_mask, result, 0)  # columns past the edge stay finite (never stored)"
        )
        vars_[reducer.name] = "result"
        for leaf in out_leaves:
            index = "out_offs" if leaf.space == OUT else f"(out_offs // {leaf.arg}_inner) % {leaf.arg}_size"
            lines.append(
                f"{leaf.arg} = tl.load({leaf.arg}_ptr + {index}, mask=col_mask, other=0.0).to(tl.float32)"
            )
            vars_[leaf.ref] = leaf.arg
        for node in plan.post_reduced:
            expr = _emit(plan, node, vars_, helpers, per_column=False)
            var = identifier(f"v_{node.name}", set(vars_.values()))
            lines += [f"# {node.op}  ({node.origin})", f"{var} = {expr}"]
            vars_[node.name] = var
    if plan.mode == "reduce":
        result = vars_[plan.output]
        lines.append(f"tl.store(out_ptr + out_offs, {result}.to(out_ptr.dtype.element_ty), mask=col_mask)")
        return lines
    if stat == "welford":
        lines += [
            "mean_c = mean",
            "rstd_c = 1.0 / tl.sqrt(m2 / n_red + eps)  # biased variance, as the norm layers",
        ]
    elif stat == "lse":
        lines += [
            "m_c = tl.where(col_mask, m, 0.0)  # columns past the edge stay finite (never stored)",
            "s_c = tl.where(col_mask, s, 1.0)",
            "log_s_c = tl.log(tl.where(s_c == 0.0, 1.0, s_c))",
        ]
    lines += [
        "for r0 in range(r_start, r_end, BLOCK_R):",
        "    r = r0 + r_lanes",
        "    offs = base + r[:, None].to(tl.int64) * n_inner + cols[None, :]",
        "    mask = (r[:, None] < r_end) & col_mask[None, :]",
    ]
    roots = _refs(plan.post_full)
    uses_v = reducer.kind is not OpKind.REDUCTION  # norm / softmax values are functions of the input element
    if uses_v:
        roots.add(reducer.operands[0].name)  # type: ignore[union-attr]
    needed = _ancestors(plan, roots)
    pre = [n for n in plan.pre if n.name in needed]
    body, value = _elementwise_body(plan, pre, full_leaves, helpers, reducer.operands[0], loop2=True)
    lines += _indent(body, 1)
    if uses_v:
        lines.append(f"    v = {value}")
    loop_vars = dict(vars_)
    if reducer.kind is OpKind.REDUCTION:
        lines.append(
            "    red = result[None, :]  # the reduced statistic, broadcast back over the reduced dims"
        )
    else:
        lines += _indent(_full_value(plan), 1)
    loop_vars[reducer.name] = "red"
    loop_vars.update(_loop_vars(plan, full_leaves))
    for node in plan.post_full:
        expr = _emit(plan, node, loop_vars, helpers, per_column=True)
        var = identifier(f"v_{node.name}", set(loop_vars.values()))
        lines += [f"    # {node.op}  ({node.origin})", f"    {var} = {expr}"]
        loop_vars[node.name] = var
    lines.append(
        f"    tl.store(out_ptr + offs, {loop_vars[plan.output]}.to(out_ptr.dtype.element_ty), mask=mask)"
    )
    return lines


def _reduced_value(op: str) -> str:
    return {
        "sum": "acc",
        "mean": "acc / n_red",
        "prod": "acc",
        "amax": "acc",
        "amin": "acc",
        "argmax": "idx.to(tl.int64)",
        "argmin": "idx.to(tl.int64)",
        "logsumexp": "m + tl.log(tl.where(s == 0.0, 1.0, s))  # all -inf (s == 0): -inf, as PyTorch",
    }[op]


def _full_value(plan: ReducePlan) -> list[str]:
    """`red`: the reducer's value at each element of the tile (normalise mode)."""
    reducer = plan.reducer
    if reducer.kind is OpKind.NORM:
        lines = ["red = (v - mean_c[None, :]) * rstd_c[None, :]"]
        weight, bias = reducer.operands[1], reducer.operands[2]
        args = {lf.ref: lf.arg for lf in plan.leaves}
        if isinstance(weight, Ref):
            lines.append(f"red = red * {args[weight.name]}  # affine weight")
        if isinstance(bias, Ref):
            lines.append(f"red = red + {args[bias.name]}  # affine bias")
        return lines
    if reducer.op == "softmax":
        return ["red = tl.exp(v - m_c[None, :]) / s_c[None, :]"]
    if reducer.op == "log_softmax":
        return ["red = v - m_c[None, :] - log_s_c[None, :]"]
    raise NotApplicable(f"no per-element value for {reducer.op}")


def _loop_vars(plan: ReducePlan, full_leaves: list[Leaf]) -> dict[str, str]:
    vars_ = {lf.ref: lf.arg for lf in full_leaves}
    vars_.update({n.name: f"v_{n.name}" for n in plan.pre})
    return vars_


def _elementwise_body(
    plan: ReducePlan,
    nodes: list[OpNode],
    full_leaves: list[Leaf],
    helpers: set[str],
    value: Value,
    loop2: bool = False,
) -> tuple[list[str], str]:
    """Load the full-size operands the nodes need, evaluate the nodes; the expression for `value`."""
    needed = _refs(nodes)
    if isinstance(value, Ref) and (not loop2 or plan.reducer.kind is not OpKind.REDUCTION):
        needed.add(value.name)
    if loop2:
        needed |= _refs(plan.post_full) | {v.name for v in plan.reducer.operands[1:] if isinstance(v, Ref)}
    lines: list[str] = []
    for leaf in full_leaves:
        if leaf.ref not in needed:
            continue
        index = "offs" if leaf.space == FULL else f"(offs // {leaf.arg}_inner) % {leaf.arg}_size"
        lines.append(f"{leaf.arg} = tl.load({leaf.arg}_ptr + {index}, mask=mask, other=0.0).to(tl.float32)")
    vars_ = {lf.ref: lf.arg for lf in full_leaves}
    lines += emit_nodes(plan, nodes, vars_, helpers)
    assert isinstance(value, Ref)
    return lines, vars_.get(value.name, "")


# ------------------------------------------------------------------------------------------- launcher
def _launcher(plan: ReducePlan, stat: str, kernel_name: str, launcher_name: str) -> str:
    reducer = plan.reducer
    tensors = [lf.arg for lf in plan.leaves]
    extra_args: list[str] = [f"{s.arg}: float" for s in plan.scalars]
    layout_args = _layout_args(reducer)
    signature = ", ".join([f"{t}: torch.Tensor" for t in tensors] + extra_args + layout_args)
    full = [lf.arg for lf in plan.leaves if lf.space in (FULL, BFULL) and not _is_affine(plan, lf.ref)]
    first = next(lf.arg for lf in plan.leaves if lf.space == FULL)
    lines = [
        f"def {launcher_name}({signature}) -> torch.Tensor:",
        f'    """Launch {kernel_name}: sizes, strides of the [outer, reduced, inner] view and the split read at run time."""',
        f"    full_shape = torch.broadcast_shapes({', '.join(t + '.shape' for t in full)})",
    ]
    for leaf in plan.leaves:
        if leaf.space == FULL:
            lines += [
                f"    if {leaf.arg}.shape != full_shape:",
                f'        raise ValueError(f"{leaf.arg} has shape {{tuple({leaf.arg}.shape)}}, expected {{tuple(full_shape)}}")',
            ]
        lines.append(f"    {leaf.arg} = {leaf.arg}.contiguous()")
    lines += _layout_lines(plan)
    for leaf in plan.leaves:
        if leaf.space == BFULL:
            lines.append(
                f"    {leaf.arg}_inner, {leaf.arg}_size = broadcast_layout({leaf.arg}.shape, full_shape)"
            )
        elif leaf.space == BOUT:
            lines.append(
                f"    {leaf.arg}_inner, {leaf.arg}_size = broadcast_layout({leaf.arg}.shape, out_shape)"
            )
        elif leaf.space == OUT:
            lines += [
                f"    if {leaf.arg}.shape != out_shape:",
                f'        raise ValueError(f"{leaf.arg} has shape {{tuple({leaf.arg}.shape)}}, expected {{tuple(out_shape)}}")',
            ]
    out_dtype = "torch.int64" if reducer.op in ("argmax", "argmin") else f"{first}.dtype"
    lines += [
        f"    out = torch.empty(out_shape, device={first}.device, dtype={out_dtype})",
        "    if out.numel() == 0 or n_red == 0:",
        "        return out",
        *(rows_launch_lines(plan, f"{stem(plan)}_rows_kernel") if uses_rows_kernel(plan) else []),
        "    block_i = 1 if n_inner == 1 else min(triton.next_power_of_2(n_inner), MAX_BLOCK_I)",
        "    block_r = max(1, min(BLOCK // block_i, triton.next_power_of_2(n_red)))",
        "    n_itiles = triton.cdiv(n_inner, block_i)",
        "    n_tiles = n_outer * n_itiles",
        "    # few long reductions: split each across programs so the whole GPU works (partials merged after)",
        "    n_split = 1",
        "    if n_tiles < SPLIT_TARGET_PROGRAMS:",
        "        n_split = max(1, min(triton.cdiv(SPLIT_TARGET_PROGRAMS, n_tiles), n_red // (block_r * MIN_TILES_PER_SPLIT)))",
        "    red_per_split = triton.cdiv(triton.cdiv(n_red, n_split), block_r) * block_r",
        "    n_split = triton.cdiv(n_red, red_per_split)",
    ]
    states = _STATES[stat]
    dtype_of = {"tl.float32": "torch.float32", "tl.int32": "torch.int32"}
    parts = [
        f"    part_{s} = torch.empty(n_outer * n_inner * n_split if n_split > 1 else 1, device={first}.device, dtype={dtype_of[dt]})"
        for s, _, dt in states
    ]
    lines += parts
    args = [*tensors, "out", *(f"part_{s}" for s, _, _ in states)]
    bcast = [f"{lf.arg}_inner, {lf.arg}_size" for lf in plan.leaves if lf.space in (BFULL, BOUT)]
    scalar_args = [s.arg for s in plan.scalars] + (["eps"] if reducer.kind is OpKind.NORM else [])
    common = f"{', '.join(args)}, n_red, n_inner, n_itiles, {{grid_split}}, n_split, red_per_split"
    tail = "".join(f", {a}" for a in [*bcast, *scalar_args])
    consts = "BLOCK_R=block_r, BLOCK_I=block_i, num_warps=NUM_WARPS"
    phase1_split = "n_split" if plan.mode == "normalise" else "1"
    lines += [
        "    if n_split > 1:",
        f"        {kernel_name}[(n_tiles * n_split,)](",
        f"            {common.format(grid_split='n_split')}{tail},",
        f"            {consts}, PHASE=0, USE_PARTIALS=True,",
        "        )",
        f"    grid_split = {phase1_split}",
        f"    {kernel_name}[(n_tiles * grid_split,)](",
        f"        {common.format(grid_split='grid_split')}{tail},",
        f"        {consts}, PHASE=1, USE_PARTIALS=n_split > 1,",
        "    )",
        "    return out",
    ]
    return "\n".join(lines) + "\n"


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


def _layout_lines(plan: ReducePlan) -> list[str]:
    reducer = plan.reducer
    if reducer.op in ("nn_layer_norm", "layer_norm"):
        return [
            "    k = len(normalized_shape)",
            "    if tuple(full_shape[-k:]) != tuple(normalized_shape):",
            '        raise ValueError(f"input shape {tuple(full_shape)} does not end with {tuple(normalized_shape)}")',
            "    n_red, n_inner = math.prod(normalized_shape), 1",
            "    n_outer = math.prod(full_shape) // n_red",
            "    out_shape = full_shape",
        ]
    if reducer.op == "nn_group_norm":
        return [
            "    if full_shape[1] % num_groups:",
            '        raise ValueError(f"{full_shape[1]} channels do not split into {num_groups} groups")',
            "    n_outer, n_inner = full_shape[0] * num_groups, 1  # each (sample, group) is one contiguous row",
            "    n_red = math.prod(full_shape) // n_outer if n_outer else 0",
            "    out_shape = full_shape",
        ]
    if reducer.op == "nn_instance_norm":
        return [
            "    n_outer, n_red, n_inner = full_shape[0] * full_shape[1], math.prod(full_shape[2:]), 1",
            "    out_shape = full_shape  # each (sample, channel) plane is one contiguous row",
        ]
    lines = ["    n_outer, n_red, n_inner = reduction_layout(full_shape, dim)"]
    if reducer.kind is OpKind.SOFTMAX:
        return [*lines, "    out_shape = full_shape"]
    keep = reducer.param("keepdim")
    if plan.mode == "normalise":
        return [*lines, "    out_shape = full_shape"]
    lines += [
        "    dims = {d % len(full_shape) for d in ((dim,) if isinstance(dim, int) else dim)}",
    ]
    if keep == Const(True):
        lines.append("    out_shape = torch.Size(1 if d in dims else s for d, s in enumerate(full_shape))")
    else:
        lines.append("    out_shape = torch.Size(s for d, s in enumerate(full_shape) if d not in dims)")
    return lines


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
