"""Triton source for a `ConvReducePlan`: the channel-tile kernel, its finish kernel and their launcher.

The main kernel's program owns every channel of BLOCK_S consecutive positions of the *grid* (the spatial
positions after the pools) of one sample: values are [C_PAD, BLOCK_S] tiles, so ops over the channel dim
(softmax, min / max / sum / logsumexp) are in-register reductions over axis 0. Pools are nested window loops:
for each grid position the pool-2 window walks pool-1 positions, whose pool-1 window walks conv-output
positions; the ops before a pool run on every window element as it is loaded. The conv output is read once
(windows do not overlap in the usual kernel == stride configuration) and only the final result is written.

A reduction over all spatial dims stores one fp32 partial per (sample, program, channel); the finish kernel
(one program per sample) merges them and applies the per-channel ops, the channel reduction and what follows.
"""

from __future__ import annotations

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.codegen.fused_elementwise import operand_renderer
from htam_graph.rules.codegen.triton_math import emit_op
from htam_graph.rules.ops import OpNode, Ref, Value
from htam_graph.rules.recipes.conv_reduce.plan import PLANE, ROW, SCALAR, TILE, ConvReducePlan, Step

__all__ = ["main_kernel_source", "finish_kernel_source"]

_NEG_INF, _POS_INF = '-float("inf")', 'float("inf")'
_SPATIAL_COMBINE = {"sum": "tl.sum", "mean": "tl.sum", "amax": "tl.max", "amin": "tl.min"}
_SPATIAL_INIT = {"sum": "0.0", "mean": "0.0", "amax": _NEG_INF, "amin": _POS_INF}


class _Ops:
    """Renders the plan's ops onto Triton expressions, tracking variable names and helpers."""

    def __init__(self, plan: ConvReducePlan) -> None:
        self.plan = plan
        self.vars: dict[str, str] = {}
        self.helpers: set[str] = set()
        self.scalars = {s.path: s.arg for s in plan.scalars}
        self.leaves = {leaf.ref: leaf for leaf in plan.leaves}
        self.count = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def render(self, value: Value, layout: str) -> str:
        return operand_renderer(lambda name: self._tensor(name, layout), self.scalars)(value)

    def _tensor(self, name: str, layout: str) -> str:
        if name in self.vars:
            return self.vars[name]
        leaf = self.leaves[name]
        if not leaf.per_channel:
            return f"{leaf.arg}_s"
        return f"{leaf.arg}_c[:, None]" if layout == TILE else f"{leaf.arg}_c"

    def step(self, step: Step, indent: str) -> list[str]:
        """Lines computing one step's value (elementwise, norm, softmax, channel reduction, `same`)."""
        node, layout = step.node, step.layout
        var = self.fresh("v")
        lines = [f"{indent}# {node.op}  ({node.origin})"]
        if step.role == "ew":
            emitted = emit_op(node, lambda v: self.render(v, layout))
            self.helpers |= emitted.helpers
            lines.append(f"{indent}{var} = {emitted.expr}")
        elif step.role == "same":  # a reduction over size-1 dims: the same values
            lines = [f"{indent}{var} = {self.render(node.operands[0], layout)}  # {node.op} over size-1 dims"]
        elif step.role == "norm":
            lines += self._norm(node, var, indent)
        elif step.role == "softmax":
            lines += self._softmax(node, layout, var, indent)
        elif step.role == "channel":
            lines += self._channel(node, layout, var, indent)
        else:
            raise NotApplicable(f"step {step.role} is not an op")
        self.vars[node.name] = var
        return lines

    def _norm(self, node: OpNode, var: str, ind: str) -> list[str]:
        x = self.render(node.operands[0], TILE)
        lines = [f"{ind}{var} = ({x} - nmean[:, None]) * nrstd[:, None]"]
        weight, bias = node.operands[1], node.operands[2]
        if isinstance(weight, Ref):
            lines.append(f"{ind}{var} = {var} * {self.leaves[weight.name].arg}_c[:, None]  # affine weight")
        if isinstance(bias, Ref):
            lines.append(f"{ind}{var} = {var} + {self.leaves[bias.name].arg}_c[:, None]  # affine bias")
        return lines

    def _softmax(self, node: OpNode, layout: str, var: str, ind: str) -> list[str]:
        x = self.render(node.operands[0], layout)
        cm, bc = ("cmask[:, None]", "[None, :]") if layout == TILE else ("cmask", "")
        lines = [
            f"{ind}t = tl.where({cm}, {x}, {_NEG_INF})  # padded channels never count",
            f"{ind}mx = tl.max(t, 0)",
            f"{ind}e = tl.exp(t - mx{bc})",
            f"{ind}den = tl.sum(e, 0)",
        ]
        if node.op == "softmax":
            lines.append(f"{ind}{var} = e / den{bc}")
        else:
            lines.append(f"{ind}{var} = t - mx{bc} - tl.log(den){bc}")
        return lines

    def _channel(self, node: OpNode, layout: str, var: str, ind: str) -> list[str]:
        x = self.render(node.operands[0], layout)
        cm, bc = ("cmask[:, None]", "[None, :]") if layout == TILE else ("cmask", "")
        op = node.op
        if op in ("sum", "mean"):
            lines = [f"{ind}{var} = tl.sum(tl.where({cm}, {x}, 0.0), 0)"]
            if op == "mean":
                lines.append(f"{ind}{var} = {var} / C")
            return lines
        if op in ("amax", "amin"):
            fn, fill = ("tl.max", _NEG_INF) if op == "amax" else ("tl.min", _POS_INF)
            return [f"{ind}{var} = {fn}(tl.where({cm}, {x}, {fill}), 0)"]
        return [  # logsumexp: max-shifted; all -inf gives -inf (as PyTorch), never NaN
            f"{ind}mx = tl.max(tl.where({cm}, {x}, {_NEG_INF}), 0)",
            f"{ind}mx = tl.where(mx == {_NEG_INF}, 0.0, mx)",
            f"{ind}{var} = mx + tl.log(tl.sum(tl.where({cm}, tl.exp({x} - mx{bc}), 0.0), 0))",
        ]


def _leaf_loads(plan: ConvReducePlan, steps: list[Step], indent: str) -> list[str]:
    """Load the leaves the steps read, once per program (per-channel vectors [C_PAD] or scalars)."""
    used = {v.name for s in steps for v in s.node.operands if isinstance(v, Ref)}
    lines = []
    for leaf in plan.leaves:
        if leaf.ref not in used:
            continue
        if leaf.per_channel:
            lines.append(
                f"{indent}{leaf.arg}_c = tl.load({leaf.arg}_ptr + c, mask=cmask, other=0.0).to(tl.float32)"
            )
        else:
            lines.append(f"{indent}{leaf.arg}_s = tl.load({leaf.arg}_ptr).to(tl.float32)")
    return lines


def _level_steps(plan: ConvReducePlan, level: int) -> list[Step]:
    """The ops evaluated at one window level of the main kernel (tile values, then row values)."""
    return [
        s
        for s in plan.steps
        if s.layout in (TILE, ROW) and s.level == level and s.role not in ("pool", "window", "spatial")
    ]


# ------------------------------------------------------------------------------------------- main kernel
def main_kernel_source(plan: ConvReducePlan, name: str) -> tuple[str, set[str]]:
    """The channel-tile kernel text and the helpers it calls."""
    ops = _Ops(plan)
    n_pools = len(plan.pools)
    params = ["y_ptr", "out_ptr", "part_ptr"]
    if plan.norm is not None:
        params += ["nmean_ptr", "nrstd_ptr"]
    params += [f"{leaf.arg}_ptr" for leaf in plan.leaves]
    params += ["C", "n_grid", "n_tiles"] + (["tiles_per_program"] if plan.spatial is not None else [])
    params += [f"D{j}, H{j}, W{j}" for j in range(n_pools + 1)]
    for j in range(1, n_pools + 1):
        params.append(f"S{j}D, S{j}H, S{j}W, P{j}D, P{j}H, P{j}W, Q{j}D, Q{j}H, Q{j}W, DIV{j}")
    if plan.norm is not None and plan.norm.op == "nn_group_norm":
        params += ["G", "CPG"]
    params += [s.arg for s in plan.scalars]
    for j in range(1, n_pools + 1):
        params.append(f"K{j}D: tl.constexpr, K{j}H: tl.constexpr, K{j}W: tl.constexpr, CIP{j}: tl.constexpr")
    params += ["C_PAD: tl.constexpr", "BLOCK_S: tl.constexpr"]
    lines = [
        "@triton.jit",
        f"def {name}(",
        *(f"    {p}," for p in params),
        "):",
        f'    """{plan.describe()}: one program = all channels of BLOCK_S grid positions of one sample."""',
        "    pid = tl.program_id(0)",
        "    n = tl.program_id(1).to(tl.int64)",
        "    c = tl.arange(0, C_PAD)",
        "    cmask = c < C",
        "    plane = (n * C + c) * (D0 * H0 * W0)  # start of each channel of this sample in the conv output",
    ]
    tile_steps = [s for s in plan.steps if s.layout == TILE]
    lines += _leaf_loads(plan, tile_steps + [s for s in plan.steps if s.layout == ROW], "    ")
    if plan.norm is not None:
        index = "c" if plan.norm.op == "nn_batch_norm" else "n * G + c // CPG"
        lines += [
            f"    nmean = tl.load(nmean_ptr + {index}, mask=cmask, other=0.0)  # norm statistics per channel",
            f"    nrstd = tl.load(nrstd_ptr + {index}, mask=cmask, other=0.0)",
        ]
    if plan.spatial is not None:
        op = plan.spatial.op
        init = _SPATIAL_INIT[op]
        body, value = _positions(plan, ops, "(pid * tiles_per_program + it)", "        ")
        merge = {"amax": "tl.maximum(part, {})", "amin": "tl.minimum(part, {})"}.get(op, "part + {}")
        lines += [
            f"    # {op} over the spatial dims ({plan.spatial.origin}): this program's partial per channel",
            f"    part = tl.full([C_PAD], {init}, tl.float32)",
            "    for it in range(tiles_per_program):  # several tiles per program: few partials to merge",
            *body,
            f"        t = tl.where(cmask[:, None] & ok{n_pools}[None, :], {value}, {init})",
            f"        part = {merge.format(_SPATIAL_COMBINE[op] + '(t, 1)')}",
            "    tl.store(part_ptr + (n * n_tiles + pid) * C_PAD + c, part, mask=cmask)",
        ]
        return "\n".join(lines) + "\n", ops.helpers
    body, value = _positions(plan, ops, "pid", "    ")
    lines += body
    if plan.channel is not None:  # the channel reduction and the ops after it ran inside _positions
        result = ops.vars[plan.output]
        lines.append(
            f"    tl.store(out_ptr + n * n_grid + s, {result}.to(out_ptr.dtype.element_ty), mask=smask)"
        )
    else:
        lines += [
            "    offs = (n * C + c)[:, None] * n_grid + s[None, :]",
            f"    tl.store(out_ptr + offs, {value}.to(out_ptr.dtype.element_ty), mask=cmask[:, "
            "None] & smask[None, :])",
        ]
    return "\n".join(lines) + "\n", ops.helpers


def _positions(plan: ConvReducePlan, ops: _Ops, tile: str, ind: str) -> tuple[list[str], str]:
    """The grid positions of tile `tile`, their pool-level coordinates and the value there."""
    top = len(plan.pools)
    lines = [f"{ind}s = {tile} * BLOCK_S + tl.arange(0, BLOCK_S)", f"{ind}smask = s < n_grid"]
    if top:
        lines += [
            f"{ind}pw{top} = s % W{top}",
            f"{ind}ph{top} = (s // W{top}) % H{top}",
            f"{ind}pd{top} = s // (W{top} * H{top})",
        ]
    lines.append(f"{ind}ok{top} = smask")
    body, value = _level(plan, ops, top, ind)
    return lines + body, value


def _level(plan: ConvReducePlan, ops: _Ops, level: int, ind: str) -> tuple[list[str], str]:
    """Lines computing the [C_PAD, BLOCK_S] value at pool level `level` for positions (pd, ph, pw){level}."""
    if level == 0:
        if plan.pools:
            lines = [f"{ind}offs = (pd0 * H0 + ph0) * W0 + pw0"]
        else:
            lines = [f"{ind}offs = s"]
        lines += [
            f"{ind}x0 = tl.load(y_ptr + plane[:, None] + offs[None, :], mask=cmask[:, "
            "None] & ok0[None, :], other=0.0)",
        ]
        ops.vars[plan.library.name] = "x0"
        value = "x0"
    else:
        lines, value = _window(plan, ops, level, ind)
    for step in _level_steps(plan, level):
        lines += ops.step(step, ind)
        value = ops.vars[step.node.name]
    return lines, value


def _window(plan: ConvReducePlan, ops: _Ops, j: int, ind: str) -> tuple[list[str], str]:
    """The j-th pool (1-based) over level j-1 values: window loops, accumulation, divisor."""
    pool = plan.pools[j - 1]
    fold = _fold_of(pool)
    is_max = fold in ("max", "min")
    below = j - 1
    spanning = plan.window_dims(pool) is not None
    # Unroll only a pool module's small window over the conv output. A window spanning whole reduced dims is
    # as long as those dims (level2/36 sums H = 256 rows): unrolled, its [C_PAD, BLOCK_S] body makes Triton
    # compile for minutes on an H200 (past the 240 s evaluation timeout, holding the GPU's shared lock
    # meanwhile), so it is a loop at run time.
    rng = "tl.static_range" if below == 0 and not spanning else "range"
    init = _POS_INF if fold == "min" else _NEG_INF if fold == "max" else "0.0"
    what = "window spanning the reduced dims" if spanning else "window"
    row = next(st for st in plan.steps if st.node is pool).layout == ROW  # after the channel reduction
    shape, cm, bc = ("[BLOCK_S]", "", "") if row else ("[C_PAD, BLOCK_S]", "cmask[:, None] & ", "[None, :]")
    lines = [
        f"{ind}# {pool.op} ({pool.origin}): {what} over level-{below} positions",
        f"{ind}acc{j} = tl.full({shape}, {init}, tl.float32)",
        f"{ind}bd{j} = pd{j} * S{j}D - P{j}D",
        f"{ind}bh{j} = ph{j} * S{j}H - P{j}H",
        f"{ind}bw{j} = pw{j} * S{j}W - P{j}W",
        f"{ind}for kd{j} in {rng}(K{j}D):",
        f"{ind}    pd{below} = bd{j} + kd{j} * Q{j}D",
        f"{ind}    okd{j} = ok{j} & (pd{below} >= 0) & (pd{below} < D{below})",
        f"{ind}    for kh{j} in {rng}(K{j}H):",
        f"{ind}        ph{below} = bh{j} + kh{j} * Q{j}H",
        f"{ind}        okh{j} = okd{j} & (ph{below} >= 0) & (ph{below} < H{below})",
        f"{ind}        for kw{j} in {rng}(K{j}W):",
        f"{ind}            pw{below} = bw{j} + kw{j} * Q{j}W",
        f"{ind}            ok{below} = okh{j} & (pw{below} >= 0) & (pw{below} < W{below})",
    ]
    inner = ind + "            "
    body, value = _level(plan, ops, below, inner)
    lines += body
    valid = f"{cm}ok{below}{bc}"
    if is_max:
        fn = "tl.maximum" if fold == "max" else "tl.minimum"
        lines.append(f"{inner}acc{j} = {fn}(acc{j}, tl.where({valid}, {value}, {init}))")
        lines.append(f"{ind}pooled{j} = acc{j}")
    elif fold in ("sum", "mean"):
        lines.append(f"{inner}acc{j} += tl.where({valid}, {value}, 0.0)")
        divisor = f" / (K{j}D * K{j}H * K{j}W)" if fold == "mean" else ""
        lines.append(f"{ind}pooled{j} = acc{j}{divisor}")
    else:
        lines += [
            f"{inner}acc{j} += tl.where({valid}, {value}, 0.0)",
            f"{ind}# PyTorch's divisor: the window clipped to the padded input (count_include_pad) or "
            "the input",
            f"{ind}ed{j} = tl.minimum(bd{j} + K{j}D, D{below} + P{j}D)",
            f"{ind}eh{j} = tl.minimum(bh{j} + K{j}H, H{below} + P{j}H)",
            f"{ind}ew{j} = tl.minimum(bw{j} + K{j}W, W{below} + P{j}W)",
            f"{ind}if CIP{j}:",
            f"{ind}    count{j} = (ed{j} - bd{j}) * (eh{j} - bh{j}) * (ew{j} - bw{j})",
            f"{ind}else:",
            f"{ind}    count{j} = (tl.minimum(ed{j}, D{below}) - tl.maximum(bd{j}, "
            f"0)) * (tl.minimum(eh{j}, H{below}) - tl.maximum(bh{j}, 0))",
            f"{ind}    count{j} = count{j} * (tl.minimum(ew{j}, W{below}) - tl.maximum(bw{j}, 0))",
            f"{ind}count{j} = tl.where(DIV{j} > 0, DIV{j}, count{j})",
            f"{ind}pooled{j} = acc{j} / tl.maximum(count{j}, 1).to(tl.float32)[None, :]",
        ]
    # positions outside the grid / previous level folded nothing (+-inf): keep them finite for the ops after
    lines.append(f"{ind}pooled{j} = tl.where(ok{j}{bc}, pooled{j}, 0.0)")
    ops.vars[pool.name] = f"pooled{j}"
    return lines, f"pooled{j}"


def _fold_of(level: OpNode) -> str:
    """How a window level folds its elements: max / min / sum / mean (a reduction) or avg (a pool module)."""
    if level.op.startswith("max_pool"):
        return "max"
    if level.op.startswith("avg_pool"):
        return "avg"
    return {"amax": "max", "amin": "min", "sum": "sum", "mean": "mean"}[level.op]


# ------------------------------------------------------------------------------------------- finish kernel
def finish_kernel_source(plan: ConvReducePlan, name: str, ops_helpers: set[str]) -> str:
    """Per sample: merge the spatial partials, then the per-channel ops, channel reduction and the rest."""
    assert plan.spatial is not None
    ops = _Ops(plan)
    op = plan.spatial.op
    params = ["part_ptr", "out_ptr", *(f"{leaf.arg}_ptr" for leaf in plan.leaves), "C", "n_grid", "n_tiles"]
    params += [s.arg for s in plan.scalars] + ["C_PAD: tl.constexpr", "BLOCK_T: tl.constexpr"]
    combine = {"sum": "acc + ", "mean": "acc + ", "amax": "tl.maximum(acc, ", "amin": "tl.minimum(acc, "}[op]
    close = "" if op in ("sum", "mean") else ")"
    lines = [
        "@triton.jit",
        f"def {name}(",
        *(f"    {p}," for p in params),
        "):",
        f'    """One program per sample: merge the {op} partials of every channel, '
        'then the rest of the chain."""',
        "    n = tl.program_id(0).to(tl.int64)",
        "    c = tl.arange(0, C_PAD)",
        "    cmask = c < C",
        "    t_lanes = tl.arange(0, BLOCK_T)",
        f"    acc = tl.full([C_PAD], {_SPATIAL_INIT[op]}, tl.float32)",
        "    for t0 in range(0, n_tiles, BLOCK_T):",
        "        t = t0 + t_lanes",
        "        m = (t < n_tiles)[:, None] & cmask[None, :]",
        "        p = tl.load(part_ptr + (n * n_tiles + t)[:, None] * C_PAD + c[None, :], mask=m, "
        f"other={_SPATIAL_INIT[op]})",
        f"        acc = {combine}{_SPATIAL_COMBINE[op]}(p, 0){close}",
    ]
    value = "acc / n_grid" if op == "mean" else "acc"
    lines.append(f"    red = {value}  # {op} over the spatial dims ({plan.spatial.origin})")
    ops.vars[plan.spatial.name] = "red"
    rest = [s for s in plan.steps if s.layout in (PLANE, SCALAR)]
    lines += _leaf_loads(plan, rest, "    ")
    for step in rest:
        lines += ops.step(step, "    ")
    result = ops.vars[plan.output]
    if plan.final_layout == SCALAR:
        lines.append(f"    tl.store(out_ptr + n, {result}.to(out_ptr.dtype.element_ty))")
    else:
        lines.append(f"    tl.store(out_ptr + n * C + c, {result}.to(out_ptr.dtype.element_ty), mask=cmask)")
    ops_helpers |= ops.helpers
    return "\n".join(lines) + "\n"
