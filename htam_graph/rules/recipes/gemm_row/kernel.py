"""Triton source for a `RowPlan`: one program per row of the library output, the row held in registers.

The row kernel loads y[row, :] once (fp32), evaluates every step in order (elementwise ops on vectors or
per-row scalars, masked reductions with their neutral elements, softmax, row norms, poolings by reshaping the
row into [windows, k]) and stores either the final row or one value per row. A batch norm first runs a
column-statistics kernel (one program per BLOCK_C columns, two passes over the rows: mean, then the centred
sum of squares) that also updates the running statistics in training mode, like nn.BatchNorm1d.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from htam_graph.rules.base import KernelConfig, NotApplicable
from htam_graph.rules.codegen import template
from htam_graph.rules.codegen.fused_elementwise import operand_renderer
from htam_graph.rules.codegen.triton_math import emit_op
from htam_graph.rules.ops import Ref
from htam_graph.rules.recipes.gemm_row.launcher import WINDOW_SOURCE, eps_arg, launcher
from htam_graph.rules.recipes.gemm_row.plan import ROW, RowPlan, RowStep

__all__ = ["RowSource", "WINDOW_SOURCE", "row_source"]

_NEG_INF = '-float("inf")'
_POS_INF = 'float("inf")'


@dataclass
class RowSource:
    """The generated pieces."""

    kernels: list[str]
    launcher: str
    helpers: set[str]
    constants: list[str]
    call_args: list[str] = field(default_factory=list)


@dataclass
class _Ctx:
    """Code being written for one kernel: 'row' (one row in registers) or 'col' ([BLOCK_M, BLOCK_C] tiles)."""

    plan: RowPlan
    mode: str
    lines: list[str] = field(default_factory=list)
    vars: dict[str, str] = field(default_factory=dict)
    loaded: dict[tuple[str, int], str] = field(default_factory=dict)
    helpers: set[str] = field(default_factory=set)
    counter: int = 0

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}_{self.counter}"


def _stage_block(plan: RowPlan, stage: int) -> str:
    return "BLOCK" + "".join(f" // POOL_K{i}" for i in range(stage))


def _leaf(ctx: _Ctx, ref: str, stage: int) -> str:
    """Load a tensor operand in the layout its leaf kind says (cached per stage)."""
    key = (ref, stage)
    if key in ctx.loaded:
        return ctx.loaded[key]
    leaf = next(lf for lf in ctx.plan.leaves if lf.ref == ref)
    var = f"{leaf.arg}_v{stage}"
    p = f"{leaf.arg}_ptr"
    if leaf.kind == "one":
        expr = f"tl.load({p}).to(tl.float32)"
    elif ctx.mode == "row":
        offsets = {"elem": f"row * n{stage} + cols{stage}", "feat": f"cols{stage}", "row": "row"}[leaf.kind]
        mask = f", mask=mask{stage}, other=0.0" if leaf.kind != "row" else ""
        expr = f"tl.load({p} + {offsets}{mask}).to(tl.float32)"
    else:
        index = {
            "elem": "rows[:, None] * n0 + cols0[None, :]",
            "feat": "cols0[None, :]",
            "row": "rows[:, None]",
        }
        expr = f"tl.load({p} + {index[leaf.kind]}, mask=mask0, other=0.0).to(tl.float32)"
    ctx.lines.append(f"{var} = {expr}")
    ctx.loaded[key] = var
    return var


def _render(ctx: _Ctx, step: RowStep) -> object:
    scalars = dict(ctx.plan.scalars)

    def tensor(name: str) -> str:
        return ctx.vars[name] if name in ctx.vars else _leaf(ctx, name, step.stage)

    return operand_renderer(tensor, scalars)


def _emit_step(ctx: _Ctx, step: RowStep) -> None:
    """Append the lines computing one step (after a comment naming its op) and record its variable."""
    node = step.node
    if step.action == "alias":
        ctx.vars[node.name] = ctx.vars.get(step.source, "")
        return
    ctx.lines.append(f"# {node.op}  ({node.origin})")
    emit = _STEPS.get(step.action)
    if emit is None:
        raise NotApplicable(f"no code for step {step.action}")
    var = f"v_{node.name}"
    emit(ctx, step, var, ctx.vars.get(step.source, ""))
    ctx.vars[node.name] = var


# Each appends to ctx.lines (leaf loads an expression needs land before the line that reads them).
def _elementwise(ctx: _Ctx, step: RowStep, var: str, src: str) -> None:
    emitted = emit_op(step.node, _render(ctx, step))  # type: ignore[arg-type]
    ctx.helpers |= emitted.helpers
    ctx.lines.append(f"{var} = {emitted.expr}")


def _identity(ctx: _Ctx, step: RowStep, var: str, src: str) -> None:
    ctx.lines.append(f"{var} = {src}  # over size-1 dims: one element's {step.node.op} is itself")


def _reduce(ctx: _Ctx, step: RowStep, var: str, src: str) -> None:
    ctx.lines += _reduce_lines(step.node.op, var, src, f"mask{step.stage}", f"n{step.stage}")


def _softmax(ctx: _Ctx, step: RowStep, var: str, src: str) -> None:
    m = f"mask{step.stage}"
    mx, e, den = ctx.fresh("row_max"), ctx.fresh("e"), ctx.fresh("den")
    ctx.lines += [
        f"{mx} = tl.max(tl.where({m}, {src}, {_NEG_INF}), axis=0)",
        f"{e} = tl.where({m}, tl.exp({src} - {mx}), 0.0)",
        f"{den} = tl.sum({e}, axis=0)",
        f"{var} = {e} / {den}" if step.node.op == "softmax" else f"{var} = {src} - {mx} - tl.log({den})",
    ]


def _row_norm(ctx: _Ctx, step: RowStep, var: str, src: str) -> None:
    m, n = f"mask{step.stage}", f"n{step.stage}"
    mean, d, rstd = ctx.fresh("mean"), ctx.fresh("centred"), ctx.fresh("rstd")
    eps = eps_arg(step.node.name)
    ctx.lines += [
        f"{mean} = tl.sum(tl.where({m}, {src}, 0.0), axis=0) / {n}",
        f"{d} = tl.where({m}, {src} - {mean}, 0.0)",
        f"{rstd} = 1.0 / tl.sqrt(tl.sum({d} * {d}, axis=0) / {n} + {eps})  # biased variance",
        f"{var} = {d} * {rstd}",
    ]
    ctx.lines += _affine(ctx, step, var)


def _batch_norm(ctx: _Ctx, step: RowStep, var: str, src: str) -> None:
    mean = "tl.load(bn_mean_ptr + cols0, mask=mask0, other=0.0)"
    rstd = "tl.load(bn_rstd_ptr + cols0, mask=mask0, other=0.0)"
    ctx.lines.append(f"{var} = ({src} - {mean}) * {rstd}")
    ctx.lines += _affine(ctx, step, var)


def _pool(ctx: _Ctx, step: RowStep, var: str, src: str) -> None:
    """A 1-d pool over whole windows: the row reshaped into [windows, k], reduced along the window."""
    s = step.stage
    k, block = f"POOL_K{s - 1}", _stage_block(ctx.plan, s)
    if step.node.op == "avg_pool1d":
        pooled = f"tl.sum(tl.reshape(tl.where(mask{s - 1}, {src}, 0.0), [{block}, {k}]), axis=1) / {k}"
    else:
        pooled = f"tl.max(tl.reshape(tl.where(mask{s - 1}, {src}, {_NEG_INF}), [{block}, {k}]), axis=1)"
    ctx.lines += [
        f"{var} = {pooled}",
        f"cols{s} = tl.arange(0, {block})",
        f"mask{s} = cols{s} < n{s}  # whole windows only (padding 0, no ceil mode)",
    ]


_STEPS: dict[str, Callable[[_Ctx, RowStep, str, str], None]] = {
    "ew": _elementwise,
    "identity": _identity,
    "reduce": _reduce,
    "softmax": _softmax,
    "row_norm": _row_norm,
    "batch_norm": _batch_norm,
    "pool": _pool,
}


def _affine(ctx: _Ctx, step: RowStep, var: str) -> list[str]:
    lines = []
    weight, bias = step.node.operands[1], step.node.operands[2]
    if isinstance(weight, Ref):
        lines.append(f"{var} = {var} * {_leaf(ctx, weight.name, step.stage)}  # affine weight")
    if isinstance(bias, Ref):
        lines.append(f"{var} = {var} + {_leaf(ctx, bias.name, step.stage)}  # affine bias")
    return lines


def _reduce_lines(op: str, var: str, src: str, mask: str, n: str) -> list[str]:
    if op == "sum":
        return [f"{var} = tl.sum(tl.where({mask}, {src}, 0.0), axis=0)"]
    if op == "mean":
        return [f"{var} = tl.sum(tl.where({mask}, {src}, 0.0), axis=0) / {n}"]
    if op == "amax":
        return [f"{var} = tl.max(tl.where({mask}, {src}, {_NEG_INF}), axis=0)"]
    if op == "amin":
        return [f"{var} = tl.min(tl.where({mask}, {src}, {_POS_INF}), axis=0)"]
    return [  # logsumexp
        f"{var}_m = tl.max(tl.where({mask}, {src}, {_NEG_INF}), axis=0)",
        f"{var}_m = tl.where({var}_m == {_NEG_INF}, 0.0, {var}_m)  # all -inf: log(0) = -inf, never NaN",
        f"{var} = {var}_m + tl.log(tl.sum(tl.where({mask}, tl.exp({src} - {var}_m), 0.0), axis=0))",
    ]


# ------------------------------------------------------------------------------------------- kernels
def _kernel_params(plan: RowPlan) -> list[str]:
    params = [f"{plan.library_var}_ptr", *(f"{lf.arg}_ptr" for lf in plan.leaves), "out_ptr"]
    params += ["bn_mean_ptr", "bn_rstd_ptr"] if plan.batch_norm is not None else []
    params += [f"n{s}" for s in range(len(plan.pools) + 1)]
    params += [arg for _, arg in plan.scalars]
    params += [eps_arg(s.node.name) for s in plan.steps if s.action == "row_norm"]
    params.append("BLOCK: tl.constexpr")
    params += [f"POOL_K{i}: tl.constexpr" for i in range(len(plan.pools))]
    return params


# One program per row: the library output's row loaded once, every step in registers, one store.
_ROW_KERNEL = '''\
@triton.jit
def $name(
    $params
):
    """One program per row of the library output, the row in registers: $describe."""
    row = tl.program_id(0).to(tl.int64)
    cols0 = tl.arange(0, BLOCK)
    mask0 = cols0 < n0
    $y = tl.load(${y}_ptr + row * n0 + cols0, mask=mask0, other=0.0).to(tl.float32)
    $steps
    $store
'''


def row_kernel(plan: RowPlan, name: str) -> tuple[str, set[str]]:
    """The per-row kernel."""
    ctx = _Ctx(plan, "row")
    ctx.vars[plan.library.name] = plan.library_var
    if plan.dropout is not None:
        ctx.vars[plan.dropout.name] = plan.library_var  # applied (or skipped) by torch before this kernel
    for step in plan.steps:
        _emit_step(ctx, step)
    text = template.fill(
        _ROW_KERNEL,
        name=name,
        params=[f"{p}," for p in _kernel_params(plan)],
        describe=plan.describe(),
        y=plan.library_var,
        steps=ctx.lines,
        store=_row_store(plan, ctx.vars[plan.output.node.name]),
    )
    return text, ctx.helpers


def _row_store(plan: RowPlan, value: str) -> str:
    """The final row (of its stage's length) or the row's one value."""
    if plan.output.space == ROW:
        s = plan.output.stage
        return f"tl.store(out_ptr + row * n{s} + cols{s}, {value}.to(out_ptr.dtype.element_ty), mask=mask{s})"
    return f"tl.store(out_ptr + row, {value}.to(out_ptr.dtype.element_ty))"


# Batch statistics of the value batch norm reads, per column over all rows (two passes: the mean, then the
# centred sum of squares), and nn.BatchNorm1d's running-statistics update in training mode.
_COLUMN_STATS_KERNEL = '''\
@triton.jit
def $name(
    $params
):
    """Per column: the batch mean, then the centred sum of squares (two passes, fp32), over all rows."""
    cols0 = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_mask = cols0 < n0
    acc = tl.zeros([BLOCK_M, BLOCK_C], tl.float32)
    for r0 in range(0, n_rows, BLOCK_M):
        $tile
        acc += tl.where(mask0, $value, 0.0)
    mean = tl.sum(acc, axis=0) / n_rows
    acc = tl.zeros([BLOCK_M, BLOCK_C], tl.float32)
    for r0 in range(0, n_rows, BLOCK_M):
        $tile
        centred = tl.where(mask0, $value - mean[None, :], 0.0)
        acc += centred * centred
    var = tl.sum(acc, axis=0) / n_rows  # biased: what training-mode batch norm normalises with
    tl.store(mean_ptr + cols0, mean, mask=col_mask)
    tl.store(rstd_ptr + cols0, 1.0 / tl.sqrt(var + eps), mask=col_mask)
    if UPDATE_RUNNING:  # nn.BatchNorm1d in training mode: running stats with the unbiased variance
        run_mean = tl.load(run_mean_ptr + cols0, mask=col_mask, other=0.0)
        run_var = tl.load(run_var_ptr + cols0, mask=col_mask, other=0.0)
        unbiased = var * n_rows / tl.maximum(n_rows - 1, 1)
        tl.store(run_mean_ptr + cols0, (1.0 - momentum) * run_mean + momentum * mean, mask=col_mask)
        tl.store(run_var_ptr + cols0, (1.0 - momentum) * run_var + momentum * unbiased, mask=col_mask)
'''

# One [BLOCK_M, BLOCK_C] tile of rows and the steps before the batch norm on it.
_COLUMN_TILE = """\
rows = r0 + tl.arange(0, BLOCK_M)
mask0 = (rows[:, None] < n_rows) & col_mask[None, :]
$y = tl.load(${y}_ptr + rows[:, None] * n0 + cols0[None, :], mask=mask0, other=0.0).to(tl.float32)
$steps
"""


def column_stats_kernel(plan: RowPlan, name: str, bn: RowStep) -> tuple[str, set[str]]:
    """Batch statistics of the value batch norm reads: per column, mean and 1/sqrt(var + eps); running
    update."""
    ctx = _Ctx(plan, "col")
    ctx.vars[plan.library.name] = plan.library_var
    if plan.dropout is not None:
        ctx.vars[plan.dropout.name] = plan.library_var
    for step in plan.steps:
        if step is bn:
            break
        _emit_step(ctx, step)
    params = [f"{plan.library_var}_ptr", *(f"{lf.arg}_ptr" for lf in plan.leaves), "mean_ptr", "rstd_ptr"]
    params += ["run_mean_ptr", "run_var_ptr", "n_rows", "n0", *(a for _, a in plan.scalars)]
    params += ["eps", "momentum", "BLOCK_M: tl.constexpr", "BLOCK_C: tl.constexpr"]
    params += ["UPDATE_RUNNING: tl.constexpr"]
    text = template.fill(
        _COLUMN_STATS_KERNEL,
        name=name,
        params=[f"{p}," for p in params],
        tile=template.fill(_COLUMN_TILE, y=plan.library_var, steps=ctx.lines),
        value=ctx.vars[bn.source],
    )
    return text, ctx.helpers


def row_source(plan: RowPlan, config: KernelConfig, stem: str) -> RowSource:
    """Every generated piece for the plan."""
    kernel_name = f"{stem}_row_kernel"
    kernel, helpers = row_kernel(plan, kernel_name)
    kernels = [kernel]
    stats_name = None
    bn = plan.batch_norm
    if bn is not None:
        stats_name = f"{stem}_column_stats_kernel"
        stats, more = column_stats_kernel(plan, stats_name, bn)
        kernels.insert(0, stats)
        helpers |= more
    text, call = launcher(plan, f"fused_{stem}", kernel_name, stats_name)
    constants = [f"NUM_WARPS = {config.num_warps}  # at least; wider rows get more warps"]
    if bn is not None:
        constants += ["STATS_BLOCK_M = 32  # rows per tile of the column statistics", "STATS_BLOCK_C = 64"]
    return RowSource(kernels, text, helpers, constants, call)
