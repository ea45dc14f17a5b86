"""Triton source for a `ReducePlan`: one tiled kernel over the [outer, reduced, inner] view of the input.

Each program owns one `outer` index and BLOCK_I consecutive `inner` columns and walks the reduced extent in
[BLOCK_R, BLOCK_I] tiles (inner == 1: one contiguous row, BLOCK_I == 1; inner > 1: coalesced columns). Loop 1
evaluates the prologue per element and folds it into a per-lane state (sum, product, max/min, (value, index),
Welford (mean, M2, count), online (max, sum of exp)); the lanes are merged by `statistics.lane_merge`
(tl.sum / tl.max / tl.min where the state allows, else tl.reduce with the state's combine function).
Reduce mode applies the epilogue to the per-column result and stores it; normalise mode runs loop 2 over the
same tiles, recomputes the prologue and writes the normalised / combined values.

When there are few (outer, column-tile) pairs and long reductions, PHASE 0 programs each fold one slice of the
reduced extent into a partial state (fp32 buffers), and the PHASE 1 kernel merges the partials with the same
combine function (Chan's formula for Welford): the split reduction of `parallelism.split_reduction`.
"""

from __future__ import annotations

from htam_graph.rules.base import KernelConfig, NotApplicable
from htam_graph.rules.codegen import template
from htam_graph.rules.codegen.fused_elementwise import identifier
from htam_graph.rules.ops import OpKind, OpNode, Ref, Value
from htam_graph.rules.recipes.reduce.emit import ancestors as _ancestors
from htam_graph.rules.recipes.reduce.emit import emit_node as _emit
from htam_graph.rules.recipes.reduce.emit import emit_nodes
from htam_graph.rules.recipes.reduce.emit import refs as _refs
from htam_graph.rules.recipes.reduce.launcher import (
    BROADCAST_LAYOUT_SOURCE,
    REDUCTION_LAYOUT_SOURCE,
    launcher_source,
)
from htam_graph.rules.recipes.reduce.plan import BFULL, BOUT, FULL, OUT, Leaf, ReducePlan, stem
from htam_graph.rules.recipes.reduce.rows import (
    OPERAND_MODE_SOURCE,
    SHORT_ROW_CONSTANT,
    rows_kernel,
    uses_rows_kernel,
)
from htam_graph.rules.recipes.reduce.statistics import COMBINES, STAT_OF, STATES, UPDATES, lane_merge

__all__ = ["KernelSource", "reduction_source"]


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
    stat = STAT_OF.get(plan.reducer.op)
    if stat is None:
        raise NotApplicable(f"no kernel statistic for {plan.reducer.op}")
    kernel, helpers = _kernel(plan, stat, kernel_name)
    rows = uses_rows_kernel(plan)
    if rows:  # norms: a second kernel for short rows, several whole rows per program (rows.py)
        kernel = rows_kernel(plan, f"{name}_rows_kernel", helpers) + "\n\n" + kernel
    combine = "@triton.jit\n" + COMBINES[stat]
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
    launcher = launcher_source(plan, stat, kernel_name, launcher_name)
    extra = (OPERAND_MODE_SOURCE,) if rows else ()
    return (
        KernelSource(kernel, helpers, combine, launcher, constants, extra),
        kernel_name,
        launcher_name,
    )


# ------------------------------------------------------------------------------------------- kernel
# Phase 0 folds this program's slice into partial states; phase 1 merges the partials (or folds the whole
# column) and finishes: the result and its ops (reduce mode) or loop 2 writing every element (normalise).
_KERNEL = '''\
@triton.jit
def $name(
    $params
):
    """$describe: one program per (outer index, BLOCK_I columns[, slice of the reduction])."""
    pid = tl.program_id(0)
    tile = pid // grid_split
    split = pid % grid_split
    o = (tile // n_itiles).to(tl.int64)
    cols = (tile % n_itiles) * BLOCK_I + tl.arange(0, BLOCK_I)
    col_mask = cols < n_inner
    base = o * n_red * n_inner
    out_offs = o * n_inner + cols  # the reduced result's flat offsets (keepdim or not)
    part_offs = out_offs * n_split  # partial states: n_split per result element
    r_lanes = tl.arange(0, BLOCK_R)
    r_start = split * red_per_split
    r_end = tl.minimum(r_start + red_per_split, n_red)
    if PHASE == 0:  # split reduction, first pass: this program's slice -> partial state
        $fold
        $store_partials
    else:
        if USE_PARTIALS:  # merge the partial states of every slice of this column tile
            $load_partials
            for j in range(1, n_split):
                $load_partials_j
                $states = _combine_$stat($states, $states_j)
        else:
            $fold
        $finish
'''


def _kernel(plan: ReducePlan, stat: str, kernel_name: str) -> tuple[str, set[str]]:
    states = STATES[stat]
    names = [s for s, _, _ in states]
    helpers: set[str] = set()
    full_leaves = [lf for lf in plan.leaves if lf.space in (FULL, BFULL)]
    out_leaves = [lf for lf in plan.leaves if lf.space in (OUT, BOUT)]
    fold = _fold_loop(plan, stat, full_leaves, helpers)
    text = template.fill(
        _KERNEL,
        name=kernel_name,
        params=[f"{p}," for p in _kernel_params(plan, names)],
        describe=plan.describe(),
        fold=fold,
        store_partials=[f"tl.store(part_{s}_ptr + part_offs + split, {s}, mask=col_mask)" for s in names],
        load_partials=[
            f"{s} = tl.load(part_{s}_ptr + part_offs, mask=col_mask, other={init})" for s, init, _ in states
        ],
        load_partials_j=[
            f"{s}_j = tl.load(part_{s}_ptr + part_offs + j, mask=col_mask, other={init})"
            for s, init, _ in states
        ],
        states=", ".join(names),
        stat=stat,
        states_j=", ".join(s + "_j" for s in names),
        finish=_finish(plan, stat, out_leaves, full_leaves, helpers),
    )
    return text, helpers


def _kernel_params(plan: ReducePlan, state_names: list[str]) -> list[str]:
    params = [f"{lf.arg}_ptr" for lf in plan.leaves] + ["out_ptr"]
    params += [f"part_{s}_ptr" for s in state_names]
    params += ["n_red", "n_inner", "n_itiles", "grid_split", "n_split", "red_per_split"]
    params += [f"{lf.arg}_inner, {lf.arg}_size" for lf in plan.leaves if lf.space in (BFULL, BOUT)]
    params += [s.arg for s in plan.scalars]
    if plan.reducer.kind is OpKind.NORM:
        params.append("eps")
    params += ["BLOCK_R: tl.constexpr", "BLOCK_I: tl.constexpr", "PHASE: tl.constexpr"]
    return [*params, "USE_PARTIALS: tl.constexpr"]


# Loop 1 over this program's slice: the prologue per element, folded into per-lane states, lanes merged.
_FOLD = """\
$init
for r0 in range(r_start, r_end, BLOCK_R):
    r = r0 + r_lanes
    offs = base + r[:, None].to(tl.int64) * n_inner + cols[None, :]
    mask = (r[:, None] < r_end) & col_mask[None, :]
    $arg_index
    $body
    v = $value
    $update
# merge the BLOCK_R lanes of each column
$merge
"""


def _fold_loop(plan: ReducePlan, stat: str, full_leaves: list[Leaf], helpers: set[str]) -> str:
    """Loop 1 over this program's slice: prologue per element, folded into per-lane states, lanes merged."""
    states = STATES[stat]
    needed = _ancestors(plan, {plan.reducer.operands[0].name})  # type: ignore[union-attr]
    body, value = _elementwise_body(
        plan, [n for n in plan.pre if n.name in needed], full_leaves, helpers, plan.reducer.operands[0]
    )
    arg_index = "r_idx = r[:, None] + tl.zeros([BLOCK_R, BLOCK_I], tl.int32)"
    return template.fill(
        _FOLD,
        init=[f"{s} = tl.full([BLOCK_R, BLOCK_I], {init}, {dtype})" for s, init, dtype in states],
        arg_index=arg_index if stat in ("argmax", "argmin") else "",
        body=body,
        value=value,
        update=UPDATES[stat],
        merge=lane_merge(stat, ", ".join(s for s, _, _ in states)),
    )


# The per-column result of a reduction, then the ops on it.
_RESULT = """\
result = $value
result = tl.where(col_mask, result, 0)  # columns past the edge stay finite (never stored)
"""

# Per-column values loop 2 reads, by statistic.
_PER_COLUMN = {
    "welford": """\
mean_c = mean
rstd_c = 1.0 / tl.sqrt(m2 / n_red + eps)  # biased variance, as the norm layers
""",
    "lse": """\
m_c = tl.where(col_mask, m, 0.0)  # columns past the edge stay finite (never stored)
s_c = tl.where(col_mask, s, 1.0)
log_s_c = tl.log(tl.where(s_c == 0.0, 1.0, s_c))
""",
}

# Loop 2 (normalise mode): every element of this program's slice, written once.
_LOOP2 = """\
for r0 in range(r_start, r_end, BLOCK_R):
    r = r0 + r_lanes
    offs = base + r[:, None].to(tl.int64) * n_inner + cols[None, :]
    mask = (r[:, None] < r_end) & col_mask[None, :]
    $body
    $red
    $post
    tl.store(out_ptr + offs, $result.to(out_ptr.dtype.element_ty), mask=mask)
"""


def _finish(
    plan: ReducePlan, stat: str, out_leaves: list[Leaf], full_leaves: list[Leaf], helpers: set[str]
) -> list[str]:
    """After the per-column state is known: the result, the ops on it, then the store (reduce mode) or
    loop 2 over this program's slice writing every element (normalise mode)."""
    vars_: dict[str, str] = {}
    lines = _reduced(plan, out_leaves, vars_, helpers) if plan.reducer.kind is OpKind.REDUCTION else []
    if plan.mode == "reduce":
        result = vars_[plan.output]
        lines.append(f"tl.store(out_ptr + out_offs, {result}.to(out_ptr.dtype.element_ty), mask=col_mask)")
        return lines
    if stat in _PER_COLUMN:
        lines.append(_PER_COLUMN[stat])
    return [*lines, _loop2(plan, full_leaves, vars_, helpers)]


def _reduced(plan: ReducePlan, out_leaves: list[Leaf], vars_: dict[str, str], helpers: set[str]) -> list[str]:
    """The reduction's per-column result, the operands read per result, and the ops on the result."""
    reducer = plan.reducer
    lines = [template.fill(_RESULT, value=_reduced_value(reducer.op))]
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
    return lines


def _loop2(plan: ReducePlan, full_leaves: list[Leaf], vars_: dict[str, str], helpers: set[str]) -> str:
    """Loop 2: the prologue again, the reducer's value at each element (`red`), the ops after it and the
    store."""
    reducer = plan.reducer
    roots = _refs(plan.post_full)
    uses_v = reducer.kind is not OpKind.REDUCTION  # norm / softmax values are functions of the input element
    if uses_v:
        roots.add(reducer.operands[0].name)  # type: ignore[union-attr]
    needed = _ancestors(plan, roots)
    pre = [n for n in plan.pre if n.name in needed]
    body, value = _elementwise_body(plan, pre, full_leaves, helpers, reducer.operands[0], loop2=True)
    if uses_v:
        body.append(f"v = {value}")
    loop_vars = dict(vars_)
    if reducer.kind is OpKind.REDUCTION:
        red = ["red = result[None, :]  # the reduced statistic, broadcast back over the reduced dims"]
    else:
        red = _full_value(plan)
    loop_vars[reducer.name] = "red"
    loop_vars.update(_loop_vars(plan, full_leaves))
    post = []
    for node in plan.post_full:
        expr = _emit(plan, node, loop_vars, helpers, per_column=True)
        var = identifier(f"v_{node.name}", set(loop_vars.values()))
        post += [f"# {node.op}  ({node.origin})", f"{var} = {expr}"]
        loop_vars[node.name] = var
    return template.fill(_LOOP2, body=body, red=red, post=post, result=loop_vars[plan.output])


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
