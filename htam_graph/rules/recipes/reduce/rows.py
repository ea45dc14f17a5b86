"""The short-row norm kernel: BLOCK_ROWS whole rows per program, each row held in registers.

Layer norm over a short last dim (level2/34: rows of 64 among 4M) and group norm after a GEMM (level2/62: rows
of 16, i.e. a (sample, group) of 16 features, among 512K) have millions of tiny rows. The tiled kernel of
kernel.py gives each row its own program: most lanes of a [BLOCK_R, 1] tile are masked, every program
pays for a cross-lane Welford merge and reads its row twice, and a broadcast operand costs a 64-bit division
and modulo per element. Here a program owns a [BLOCK_ROWS, BLOCK_N] tile (BLOCK_N = next power of 2 of the
row length, BLOCK_ROWS * BLOCK_N = BLOCK elements, one contiguous block of memory when the row length is a
power of 2): one load per element, the per-row mean and then the mean squared deviation from it (two passes
over registers, fp32: exact, no cancellation for inputs with a large mean), the affine and the fused
elementwise ops, one full store. Broadcast operands are indexed per column (layer norm affine: it repeats
along every row), per row (a conv bias before a layer norm over the last dim) or per channel (group / instance
norm affine, per-feature weights after a GEMM), decided in the launcher and computed from [BLOCK_ROWS] /
[BLOCK_N] vectors, never per element; other layouts fall back to the flat index.
"""

from __future__ import annotations

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.codegen import template
from htam_graph.rules.ops import OpKind, Ref
from htam_graph.rules.recipes.reduce.emit import emit_nodes, refs
from htam_graph.rules.recipes.reduce.plan import BFULL, FULL, Leaf, ReducePlan

__all__ = [
    "OPERAND_MODE_SOURCE",
    "SHORT_ROW_CONSTANT",
    "rows_kernel",
    "rows_launch",
    "uses_rows_kernel",
]

SHORT_ROW_CONSTANT = (
    "SHORT_ROW_MAX = 1024  # norm rows up to min(this, "
    "BLOCK) long are held whole in registers, several per program"
)

OPERAND_MODE_SOURCE = '''\
def operand_mode(inner: int, size: int, n_red: int, channel_layout: tuple[int, int] | None) -> int:
    """How the short-row kernel indexes an operand whose flat index is (i // inner) % size: 1 by column (it
    repeats along every row), 3 by row (constant along each row), 2 by channel (a per-channel operand of a
    group / instance norm), 0 per element."""
    if n_red % (inner * size) == 0:
        return 1
    if inner % n_red == 0:
        return 3
    if channel_layout is not None and (inner, size) == channel_layout:
        return 2
    return 0
'''

_CHANNEL_NORMS = ("nn_group_norm", "nn_instance_norm")


def uses_rows_kernel(plan: ReducePlan) -> bool:
    (
        """Norm modules (layer / group / instance norm, F.layer_norm) get the short-row kernel besides """
        """the tiled one."""
    )
    return plan.reducer.kind is OpKind.NORM and plan.mode == "normalise"


def _bcast(plan: ReducePlan) -> list[Leaf]:
    return [lf for lf in plan.leaves if lf.space == BFULL]


def _mode_name(leaf: Leaf) -> str:
    return f"{leaf.arg.upper()}_MODE"


# BLOCK_ROWS whole rows per program: one load per element, the per-row statistics in registers (the mean,
# then the mean squared deviation from it), the affine and the ops after the norm, one store.
_ROWS_KERNEL = '''\
@triton.jit
def $name(
    $params
):
    """$describe: BLOCK_ROWS whole rows of n_red <= BLOCK_N elements per program, in registers."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_N)
    row_mask = rows < n_rows
    col_mask = cols < n_red
    mask = row_mask[:, None] & col_mask[None, :]
    offs = rows.to(tl.int64)[:, None] * n_red + cols[None, :]
    $channels
    $loads
    $prologue
    v = $value
    # per-row statistics in fp32: the mean, then the mean squared deviation from it (biased, as the norms)
    mean = tl.sum(tl.where(mask, v, 0.0), axis=1) / n_red
    diff = tl.where(mask, v - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(diff * diff, axis=1) / n_red + eps)
    red = diff * rstd[:, None]
    $affine
    $post
    tl.store(out_ptr + offs, $result.to(out_ptr.dtype.element_ty), mask=mask)
'''

_CHANNELS = (
    "chans = (rows % n_groups)[:, None] * ch_per_group + (cols // spatial)[None, :]  # each element's channel"
)


def rows_kernel(plan: ReducePlan, kernel_name: str, helpers: set[str]) -> str:
    """The @triton.jit source of the short-row kernel (see the module docstring)."""
    if any(lf.space not in (FULL, BFULL) for lf in plan.leaves):
        raise NotApplicable("a norm operand read per reduced result")
    channels = plan.reducer.op in _CHANNEL_NORMS
    params = [f"{lf.arg}_ptr" for lf in plan.leaves] + ["out_ptr", "n_rows", "n_red"]
    params += [f"{lf.arg}_inner, {lf.arg}_size" for lf in _bcast(plan)]
    if channels:
        params.append("n_groups, ch_per_group, spatial")
    params += [s.arg for s in plan.scalars] + ["eps", "BLOCK_ROWS: tl.constexpr", "BLOCK_N: tl.constexpr"]
    params += [f"{_mode_name(lf)}: tl.constexpr" for lf in _bcast(plan)]
    prologue, vars_ = _prologue(plan, helpers)
    source = plan.reducer.operands[0]
    assert isinstance(source, Ref)  # plan_reduction checked it
    value = vars_[source.name]
    vars_[plan.reducer.name] = "red"
    post = emit_nodes(plan, plan.post_full, vars_, helpers)
    return template.fill(
        _ROWS_KERNEL,
        name=kernel_name,
        params=[f"{p}," for p in params],
        describe=plan.describe(),
        channels=_CHANNELS if channels else "",
        loads=_loads(plan),
        prologue=prologue,
        value=value,
        affine=_affine(plan),
        post=post,
        result=vars_[plan.output],
    )


def _affine(plan: ReducePlan) -> list[str]:
    weight, bias = plan.reducer.operands[1], plan.reducer.operands[2]
    args = {lf.ref: lf.arg for lf in plan.leaves}
    lines = []
    if isinstance(weight, Ref):
        lines.append(f"red = red * {args[weight.name]}  # affine weight")
    if isinstance(bias, Ref):
        lines.append(f"red = red + {args[bias.name]}  # affine bias")
    return lines


# An operand broadcast over the rows, read by column, by row, by channel (group / instance norm) or by the
# flat index, as the launcher decided (its *_MODE constexpr).
_BROADCAST_LOAD = """\
if $MODE == 1:  # repeats along every row: one [1, BLOCK_N] load
    $a = tl.load(${a}_ptr + ((cols // ${a}_inner) % ${a}_size)[None, :], mask=col_mask[None, :], other=0.0)
elif $MODE == 3:  # constant along each row: one [BLOCK_ROWS, 1] load
    ${a}_idx = (rows.to(tl.int64) * n_red // ${a}_inner) % ${a}_size
    $a = tl.load(${a}_ptr + ${a}_idx[:, None], mask=row_mask[:, None], other=0.0)
$by_channel
else:
    $a = tl.load(${a}_ptr + (offs // ${a}_inner) % ${a}_size, mask=mask, other=0.0)
$a = $a.to(tl.float32)
"""

_CHANNEL_LOAD = """\
elif $MODE == 2:  # one value per channel
    $a = tl.load(${a}_ptr + chans, mask=mask, other=0.0)
"""


def _loads(plan: ReducePlan) -> list[str]:
    """One load per operand: full-size operands at `offs`; broadcast ones by column, channel or flat index."""
    needed = refs([*plan.pre, *plan.post_full]) | {
        v.name for v in plan.reducer.operands if isinstance(v, Ref)
    }
    lines: list[str] = []
    for leaf in plan.leaves:
        if leaf.ref not in needed:
            continue
        a, mode = leaf.arg, _mode_name(leaf)
        if leaf.space == FULL:
            lines.append(f"{a} = tl.load({a}_ptr + offs, mask=mask, other=0.0).to(tl.float32)")
            continue
        by_channel = template.fill(_CHANNEL_LOAD, MODE=mode, a=a) if plan.reducer.op in _CHANNEL_NORMS else ""
        lines.append(template.fill(_BROADCAST_LOAD, MODE=mode, a=a, by_channel=by_channel))
    return lines


def _prologue(plan: ReducePlan, helpers: set[str]) -> tuple[list[str], dict[str, str]]:
    """The elementwise ops before the norm, evaluated once per element; (lines, name -> kernel variable)."""
    vars_ = {lf.ref: lf.arg for lf in plan.leaves}
    return emit_nodes(plan, plan.pre, vars_, helpers), vars_


# The launcher's branch for short rows (it returns `out`): BLOCK // block_n whole rows per program.
_ROWS_LAUNCH = """\
if n_inner == 1 and n_red <= min(BLOCK, SHORT_ROW_MAX):
    # short rows: BLOCK // block_n whole rows per program, each in registers; one read, one write
    block_n = triton.next_power_of_2(n_red)
    block_rows = min(max(1, BLOCK // block_n), triton.next_power_of_2(n_outer))
    $channels
    $kernel[(triton.cdiv(n_outer, block_rows),)](
        $args,
        BLOCK_ROWS=block_rows,
        BLOCK_N=block_n,
        $modes
        num_warps=min(NUM_WARPS, max(1, block_rows * block_n // 128)),  # >= 4 elements per thread
    )
    return out
"""

# Group / instance norm: the channel layout of each row (group norm: a row is one (sample, group)).
_GROUP_NORM_CHANNELS = """\
spatial = math.prod(full_shape[2:])
n_groups, ch_per_group = num_groups, full_shape[1] // num_groups
"""


def rows_launch(plan: ReducePlan, kernel_name: str) -> str:
    """The launcher's branch for short rows (unindented, for the launcher body); it returns `out`."""
    reducer = plan.reducer
    channels, channel_layout, extra = "", "None", []
    if reducer.op == "nn_group_norm":
        channels = _GROUP_NORM_CHANNELS
        channel_layout, extra = "(spatial, full_shape[1])", ["n_groups", "ch_per_group", "spatial"]
    elif reducer.op == "nn_instance_norm":
        channels = "spatial = n_red  # each row is one channel plane"
        channel_layout, extra = "(spatial, full_shape[1])", ["full_shape[1]", "1", "spatial"]
    bcast = _bcast(plan)
    modes = [
        f"{_mode_name(lf)}=operand_mode({lf.arg}_inner, {lf.arg}_size, n_red, {channel_layout}),"
        for lf in bcast
    ]
    args = [*(lf.arg for lf in plan.leaves), "out", "n_outer", "n_red"]
    args += [f"{lf.arg}_inner, {lf.arg}_size" for lf in bcast] + extra
    args += [s.arg for s in plan.scalars] + ["eps"]
    return template.fill(
        _ROWS_LAUNCH, channels=channels, kernel=kernel_name, args=", ".join(args), modes=modes
    )
