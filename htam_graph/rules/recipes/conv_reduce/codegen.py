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

from htam_graph.rules.codegen import template
from htam_graph.rules.ops import OpNode
from htam_graph.rules.recipes.conv_reduce.plan import PLANE, ROW, SCALAR, TILE, ConvReducePlan, Step
from htam_graph.rules.recipes.conv_reduce.steps import NEG_INF, POS_INF, Ops, leaf_loads

__all__ = ["main_kernel_source", "finish_kernel_source"]

_SPATIAL_COMBINE = {"sum": "tl.sum", "mean": "tl.sum", "amax": "tl.max", "amin": "tl.min"}
_SPATIAL_INIT = {"sum": "0.0", "mean": "0.0", "amax": NEG_INF, "amin": POS_INF}


def _level_steps(plan: ConvReducePlan, level: int) -> list[Step]:
    """The ops evaluated at one window level of the main kernel (tile values, then row values)."""
    return [
        s
        for s in plan.steps
        if s.layout in (TILE, ROW) and s.level == level and s.role not in ("pool", "window", "spatial")
    ]


# ------------------------------------------------------------------------------------------- main kernel
# The channel-tile kernel: per-program set-up, then the spatial partials (`_PARTIAL`) or the stored values.
_MAIN = '''\
@triton.jit
def $name(
    $params
):
    """$describe: one program = all channels of BLOCK_S grid positions of one sample."""
    pid = tl.program_id(0)
    n = tl.program_id(1).to(tl.int64)
    c = tl.arange(0, C_PAD)
    cmask = c < C
    plane = (n * C + c) * (D0 * H0 * W0)  # start of each channel of this sample in the conv output
    $leaf_loads
    $norm_loads
    $body
'''

_NORM_LOADS = """\
nmean = tl.load(nmean_ptr + $index, mask=cmask, other=0.0)  # norm statistics per channel
nrstd = tl.load(nrstd_ptr + $index, mask=cmask, other=0.0)
"""

# A reduction over every spatial dim: each program folds its tiles into one partial per channel.
_PARTIAL = """\
# $op over the spatial dims ($origin): this program's partial per channel
part = tl.full([C_PAD], $init, tl.float32)
for it in range(tiles_per_program):  # several tiles per program: few partials to merge
    $positions
    t = tl.where(cmask[:, None] & ok$top[None, :], $value, $init)
    part = $merge
tl.store(part_ptr + (n * n_tiles + pid) * C_PAD + c, part, mask=cmask)
"""

# Values over channels and positions: one [C_PAD, BLOCK_S] tile stored.
_STORE_TILE = """\
offs = (n * C + c)[:, None] * n_grid + s[None, :]
tl.store(out_ptr + offs, $value.to(out_ptr.dtype.element_ty), mask=cmask[:, None] & smask[None, :])
"""

# The grid positions of one tile, split into top pool-level coordinates, and the value there.
_POSITIONS = """\
s = $tile * BLOCK_S + tl.arange(0, BLOCK_S)
smask = s < n_grid
$coords
ok$top = smask
$value
"""

_COORDS = """\
pw$top = s % W$top
ph$top = (s // W$top) % H$top
pd$top = s // (W$top * H$top)
"""


def main_kernel_source(plan: ConvReducePlan, name: str) -> tuple[str, set[str]]:
    """The channel-tile kernel text and the helpers it calls."""
    ops = Ops(plan)
    text = template.fill(
        _MAIN,
        name=name,
        params=[f"{p}," for p in _main_params(plan)],
        describe=plan.describe(),
        leaf_loads=leaf_loads(plan, [s for s in plan.steps if s.layout in (TILE, ROW)]),
        norm_loads=_norm_loads(plan),
        body=_partial(plan, ops) if plan.spatial is not None else _store(plan, ops),
    )
    return text, ops.helpers


def _main_params(plan: ConvReducePlan) -> list[str]:
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
    return [*params, "C_PAD: tl.constexpr", "BLOCK_S: tl.constexpr"]


def _norm_loads(plan: ConvReducePlan) -> str:
    if plan.norm is None:
        return ""
    index = "c" if plan.norm.op == "nn_batch_norm" else "n * G + c // CPG"
    return template.fill(_NORM_LOADS, index=index)


def _partial(plan: ConvReducePlan, ops: Ops) -> str:
    assert plan.spatial is not None
    op = plan.spatial.op
    init = _SPATIAL_INIT[op]
    positions, value = _positions(plan, ops, "(pid * tiles_per_program + it)")
    merge = {"amax": "tl.maximum(part, {})", "amin": "tl.minimum(part, {})"}.get(op, "part + {}")
    return template.fill(
        _PARTIAL,
        op=op,
        origin=plan.spatial.origin,
        init=init,
        positions=positions,
        top=len(plan.pools),
        value=value,
        merge=merge.format(_SPATIAL_COMBINE[op] + "(t, 1)"),
    )


def _store(plan: ConvReducePlan, ops: Ops) -> str:
    positions, value = _positions(plan, ops, "pid")
    if plan.channel is not None:  # the channel reduction and the ops after it ran inside _positions
        result = ops.vars[plan.output]
        store = f"tl.store(out_ptr + n * n_grid + s, {result}.to(out_ptr.dtype.element_ty), mask=smask)"
    else:
        store = template.fill(_STORE_TILE, value=value)
    return positions + store


def _positions(plan: ConvReducePlan, ops: Ops, tile: str) -> tuple[str, str]:
    """The grid positions of tile `tile`, their pool-level coordinates and the value there."""
    top = len(plan.pools)
    coords = template.fill(_COORDS, top=top) if top else ""
    body, value = _level(plan, ops, top)
    return template.fill(_POSITIONS, tile=tile, coords=coords, top=top, value=body), value


def _level(plan: ConvReducePlan, ops: Ops, level: int) -> tuple[list[str], str]:
    """Lines computing the [C_PAD, BLOCK_S] value at pool level `level` for positions (pd, ph, pw){level}."""
    if level == 0:
        lines = ["offs = (pd0 * H0 + ph0) * W0 + pw0" if plan.pools else "offs = s"]
        lines.append(
            "x0 = tl.load(y_ptr + plane[:, None] + offs[None, :], mask=cmask[:, None] & ok0[None, :], "
            "other=0.0)"
        )
        ops.vars[plan.library.name] = "x0"
        value = "x0"
    else:
        window, value = _window(plan, ops, level)
        lines = [window]
    for step in _level_steps(plan, level):
        lines += ops.step(step)
        value = ops.vars[step.node.name]
    return lines, value


# The j-th pool over level j-1 (`below`) values: window loops around the value below, its accumulation, the
# pooled value after the loops. Positions outside the grid / previous level folded nothing (+-inf): the last
# line keeps them finite for the ops after.
_WINDOW = """\
# $op ($origin): $what over level-$below positions
acc$j = tl.full($shape, $init, tl.float32)
bd$j = pd$j * S${j}D - P${j}D
bh$j = ph$j * S${j}H - P${j}H
bw$j = pw$j * S${j}W - P${j}W
for kd$j in $range(K${j}D):
    pd$below = bd$j + kd$j * Q${j}D
    okd$j = ok$j & (pd$below >= 0) & (pd$below < D$below)
    for kh$j in $range(K${j}H):
        ph$below = bh$j + kh$j * Q${j}H
        okh$j = okd$j & (ph$below >= 0) & (ph$below < H$below)
        for kw$j in $range(K${j}W):
            pw$below = bw$j + kw$j * Q${j}W
            ok$below = okh$j & (pw$below >= 0) & (pw$below < W$below)
            $value
            $accumulate
$pooled
pooled$j = tl.where(ok$j$bc, pooled$j, 0.0)
"""

# avg_pool's divisor, as PyTorch computes it.
_AVG_DIVISOR = """\
# PyTorch's divisor: the window clipped to the padded input (count_include_pad) or the input
ed$j = tl.minimum(bd$j + K${j}D, D$below + P${j}D)
eh$j = tl.minimum(bh$j + K${j}H, H$below + P${j}H)
ew$j = tl.minimum(bw$j + K${j}W, W$below + P${j}W)
if CIP$j:
    count$j = (ed$j - bd$j) * (eh$j - bh$j) * (ew$j - bw$j)
else:
    count$j = (tl.minimum(ed$j, D$below) - tl.maximum(bd$j, 0)) * \
(tl.minimum(eh$j, H$below) - tl.maximum(bh$j, 0))
    count$j = count$j * (tl.minimum(ew$j, W$below) - tl.maximum(bw$j, 0))
count$j = tl.where(DIV$j > 0, DIV$j, count$j)
pooled$j = acc$j / tl.maximum(count$j, 1).to(tl.float32)[None, :]
"""


def _window(plan: ConvReducePlan, ops: Ops, j: int) -> tuple[str, str]:
    """The j-th pool (1-based) over level j-1 values: window loops, accumulation, divisor."""
    pool = plan.pools[j - 1]
    fold = _fold_of(pool)
    below = j - 1
    spanning = plan.window_dims(pool) is not None
    # Unroll only a pool module's small window over the conv output. A window spanning whole reduced dims is
    # as long as those dims (level2/36 sums H = 256 rows): unrolled, its [C_PAD, BLOCK_S] body makes Triton
    # compile for minutes on an H200 (past the 240 s evaluation timeout, holding the GPU's shared lock
    # meanwhile), so it is a loop at run time.
    rng = "tl.static_range" if below == 0 and not spanning else "range"
    init = POS_INF if fold == "min" else NEG_INF if fold == "max" else "0.0"
    row = next(st for st in plan.steps if st.node is pool).layout == ROW  # after the channel reduction
    shape, cm, bc = ("[BLOCK_S]", "", "") if row else ("[C_PAD, BLOCK_S]", "cmask[:, None] & ", "[None, :]")
    body, value = _level(plan, ops, below)
    accumulate, pooled = _fold(fold, j, f"tl.where({cm}ok{below}{bc}, {value}, {init})")
    text = template.fill(
        _WINDOW,
        op=pool.op,
        origin=pool.origin,
        what="window spanning the reduced dims" if spanning else "window",
        j=j,
        below=below,
        shape=shape,
        init=init,
        range=rng,
        value=body,
        accumulate=accumulate,
        pooled=pooled,
        bc=bc,
    )
    ops.vars[pool.name] = f"pooled{j}"
    return text, f"pooled{j}"


def _fold(fold: str, j: int, masked: str) -> tuple[str, str]:
    """(the accumulation of the masked window value inside the loops, the pooled value after them)."""
    if fold in ("max", "min"):
        fn = "tl.maximum" if fold == "max" else "tl.minimum"
        return f"acc{j} = {fn}(acc{j}, {masked})", f"pooled{j} = acc{j}"
    accumulate = f"acc{j} += {masked}"
    if fold in ("sum", "mean"):
        divisor = f" / (K{j}D * K{j}H * K{j}W)" if fold == "mean" else ""
        return accumulate, f"pooled{j} = acc{j}{divisor}"
    return accumulate, template.fill(_AVG_DIVISOR, j=j, below=j - 1)


def _fold_of(level: OpNode) -> str:
    """How a window level folds its elements: max / min / sum / mean (a reduction) or avg (a pool module)."""
    if level.op.startswith("max_pool"):
        return "max"
    if level.op.startswith("avg_pool"):
        return "avg"
    return {"amax": "max", "amin": "min", "sum": "sum", "mean": "mean"}[level.op]


# ------------------------------------------------------------------------------------------- finish kernel
# Per sample: merge the spatial partials of every channel, then the ops after the spatial reduction.
_FINISH = '''\
@triton.jit
def $name(
    $params
):
    """One program per sample: merge the $op partials of every channel, then the rest of the chain."""
    n = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, C_PAD)
    cmask = c < C
    t_lanes = tl.arange(0, BLOCK_T)
    acc = tl.full([C_PAD], $init, tl.float32)
    for t0 in range(0, n_tiles, BLOCK_T):
        t = t0 + t_lanes
        m = (t < n_tiles)[:, None] & cmask[None, :]
        p = tl.load(part_ptr + (n * n_tiles + t)[:, None] * C_PAD + c[None, :], mask=m, other=$init)
        acc = $merge
    red = $reduced  # $op over the spatial dims ($origin)
    $leaf_loads
    $steps
    $store
'''


def finish_kernel_source(plan: ConvReducePlan, name: str, ops_helpers: set[str]) -> str:
    """Per sample: merge the spatial partials, then the per-channel ops, channel reduction and the rest."""
    assert plan.spatial is not None
    ops = Ops(plan)
    op = plan.spatial.op
    params = ["part_ptr", "out_ptr", *(f"{leaf.arg}_ptr" for leaf in plan.leaves), "C", "n_grid", "n_tiles"]
    params += [s.arg for s in plan.scalars] + ["C_PAD: tl.constexpr", "BLOCK_T: tl.constexpr"]
    ops.vars[plan.spatial.name] = "red"
    rest = [s for s in plan.steps if s.layout in (PLANE, SCALAR)]
    steps = [line for step in rest for line in ops.step(step)]
    text = template.fill(
        _FINISH,
        name=name,
        params=[f"{p}," for p in params],
        op=op,
        init=_SPATIAL_INIT[op],
        merge=_finish_merge(op),
        reduced="acc / n_grid" if op == "mean" else "acc",
        origin=plan.spatial.origin,
        leaf_loads=leaf_loads(plan, rest),
        steps=steps,
        store=_finish_store(plan, ops.vars[plan.output]),
    )
    ops_helpers |= ops.helpers
    return text


def _finish_merge(op: str) -> str:
    """The partials of BLOCK_T tiles folded into `acc`."""
    if op in ("sum", "mean"):
        return f"acc + {_SPATIAL_COMBINE[op]}(p, 0)"
    return f"{'tl.maximum' if op == 'amax' else 'tl.minimum'}(acc, {_SPATIAL_COMBINE[op]}(p, 0))"


def _finish_store(plan: ConvReducePlan, result: str) -> str:
    if plan.final_layout == SCALAR:
        return f"tl.store(out_ptr + n, {result}.to(out_ptr.dtype.element_ty))"
    return f"tl.store(out_ptr + n * C + c, {result}.to(out_ptr.dtype.element_ty), mask=cmask)"
