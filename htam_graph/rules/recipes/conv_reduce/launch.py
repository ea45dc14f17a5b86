"""The Python side of `fusion.conv_reduction_epilogue`: the launcher of the channel-tile kernel (sizes, pool
windows and partial-reduction split read at run time) and the module-level constants a tuning recipe
varies."""

from __future__ import annotations

from htam_graph.rules.base import KernelConfig
from htam_graph.rules.codegen import template
from htam_graph.rules.recipes.conv_reduce.plan import ConvReducePlan

__all__ = ["POOL_WINDOW_SOURCE", "launch_constants", "launcher_source"]

POOL_WINDOW_SOURCE = '''\
def pool_window(pool: nn.Module, nd: int, in_sizes: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """(kernel, stride, padding, dilation, output sizes) of an nn.*Pool module on `in_sizes`, 3-d padded."""
    kernel = as_window(pool.kernel_size, nd)
    stride = as_window(pool.stride if pool.stride is not None else pool.kernel_size, nd)
    padding = as_window(pool.padding, nd)
    dilation = as_window(getattr(pool, "dilation", 1), nd)
    out_sizes = tuple(
        pool_output_size(n, k, s, p, d, bool(pool.ceil_mode))
        for n, k, s, p, d in zip(in_sizes, kernel, stride, padding, dilation, strict=True)
    )
    one, zero = (3 - nd) * (1,), (3 - nd) * (0,)
    return one + kernel, one + stride, zero + padding, one + dilation, one + out_sizes
'''


# ------------------------------------------------------------------------------------------- launcher
def launch_constants(stem: str, config: KernelConfig) -> list[str]:
    up = stem.upper()
    return [
        f"TILE_{up} = {config.block}  # channels x positions per program (C_PAD * BLOCK_S)",
        f"NUM_WARPS_{up} = {config.num_warps}",
        "MAX_CHANNELS = 1024  # every channel of a position lives in one program",
        f"TARGET_PROGRAMS = {max(config.max_single_block // 16, 1)}  # aim for at least this many "
        "programs (H200: 132 SMs)",
    ]


def _out_shape(plan: ConvReducePlan) -> str:
    parts = []
    for label in plan.out_labels:
        if label == "n":
            parts.append("n_batch")
        elif label == "c":
            parts.append("n_chan")
        elif label == "1":
            parts.append("1")
        else:
            parts.append(f"grid_sizes[{int(label[1:])}]")
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


# The launcher: sizes and pool windows from the tensors and modules, the output, the tile shape, the launches.
_LAUNCHER = '''\
def fused_$stem($args) -> torch.Tensor:
    """Launch $kernels; every size is read at run time."""
    if y.dim() != $rank:
        raise ValueError(f"expected a $rank-d conv output, got shape {tuple(y.shape)}")
    y = y.contiguous()
    n_batch, n_chan = y.shape[0], y.shape[1]
    if n_chan > MAX_CHANNELS:
        raise ValueError(f"{n_chan} channels do not fit one program (at most {MAX_CHANNELS})")
    sizes = [(1,) * $pad + tuple(y.shape[2:])]  # spatial sizes per pool level, 3-d padded
    $windows
    grid_sizes = sizes[-1][$pad:]
    n_grid = math.prod(grid_sizes)
    $leaf_checks
    c_pad = triton.next_power_of_2(n_chan)
    block_s = max(1, min(triton.next_power_of_2(n_grid), TILE_$up // c_pad))
    while block_s > 16 and n_batch * triton.cdiv(n_grid, block_s) < TARGET_PROGRAMS:
        block_s //= 2  # small grids: narrower tiles, so that every SM gets programs
    n_tiles = triton.cdiv(n_grid, block_s)
    out = torch.empty($out_shape, device=y.device, dtype=y.dtype)
    if out.numel() == 0 or n_grid == 0:
        return out
    $partials
    $kernel[(n_tiles, n_batch)](
        $call,
        $consts
    )
    $finish
    return out
'''

# A pool module's window, read from the module at run time.
_MODULE_WINDOW = """\
kernel, stride, padding, dilation, out_sizes = pool_window(pool$index, $nd, sizes[-1][$pad:])
windows.append((kernel, stride, padding, dilation, int(getattr(pool$index, 'divisor_override', None) or 0), \
bool(getattr(pool$index, 'count_include_pad', True))))
sizes.append(out_sizes)
"""

# A reduction over whole spatial dims, as a window spanning them.
_SPANNING_WINDOW = """\
# $op over (3-d padded) spatial dims $dims: a window spanning them, no padding
kernel = tuple(n if d in $dims else 1 for d, n in enumerate(sizes[-1]))
windows.append((kernel, (1, 1, 1), (0, 0, 0), (1, 1, 1), 0, True))
sizes.append(tuple(1 if d in $dims else n for d, n in enumerate(sizes[-1])))
"""

_LEAF_CHECK = """\
$arg = $arg.contiguous()
if $arg.numel() != $want:
    raise ValueError(f"$arg has {$arg.numel()} elements, expected {$want}")
"""

# Spatial partials: each program folds several tiles into one partial per channel, the finish kernel merges.
_PARTIALS = """\
# each program folds several tiles into one partial per channel (few partials to merge)
tiles_per_program = max(1, n_batch * n_tiles // (4 * TARGET_PROGRAMS))
n_tiles = triton.cdiv(n_tiles, tiles_per_program)
part = torch.empty(n_batch * n_tiles * c_pad, device=y.device, dtype=torch.float32)
"""

_FINISH = """\
$finish[(n_batch,)](
    $call,
    C_PAD=c_pad, BLOCK_T=max(1, min(triton.next_power_of_2(n_tiles), 4096 // c_pad)), num_warps=4,
)
"""


def launcher_source(plan: ConvReducePlan, stem: str, kernel: str, finish: str | None) -> str:
    """The Python launcher: sizes and pool windows from the tensors and modules, output, grid, launches."""
    nd = plan.rank - 2
    return template.fill(
        _LAUNCHER,
        stem=stem,
        up=stem.upper(),
        args=", ".join(_launcher_args(plan)),
        kernels=kernel + (" and " + finish if finish else ""),
        rank=plan.rank,
        pad=3 - nd,
        windows=_windows(plan),
        leaf_checks=[
            template.fill(_LEAF_CHECK, arg=leaf.arg, want="n_chan" if leaf.per_channel else "1")
            for leaf in plan.leaves
        ],
        out_shape=_out_shape(plan),
        partials=template.fill(_PARTIALS) if finish else "part = out  # no spatial partials",
        kernel=kernel,
        call=", ".join(_kernel_call(plan, finish is not None)),
        consts=[f"{c}," for c in _kernel_constants(plan, stem)],
        finish=_finish_launch(plan, finish),
    )


def _launcher_args(plan: ConvReducePlan) -> list[str]:
    args = ["y: torch.Tensor"]
    if plan.norm is not None:
        args += ["nmean: torch.Tensor", "nrstd: torch.Tensor"]
    args += [f"{leaf.arg}: torch.Tensor" for leaf in plan.leaves]
    args += [f"{s.arg}: float" for s in plan.scalars]
    args += [f"pool{j + 1}: nn.Module" for j, p in enumerate(plan.pools) if plan.window_dims(p) is None]
    if plan.norm is not None and plan.norm.op == "nn_group_norm":
        args.append("num_groups: int")
    return args


def _windows(plan: ConvReducePlan) -> list[str]:
    """Each pool level's window parameters and the spatial sizes after it."""
    if not plan.pools:
        return []
    nd = plan.rank - 2
    windows = ["windows = []"]
    for j, level in enumerate(plan.pools):
        dims = plan.window_dims(level)
        if dims is not None:
            windows.append(template.fill(_SPANNING_WINDOW, op=level.op, dims=dims))
        else:
            windows.append(template.fill(_MODULE_WINDOW, index=j + 1, nd=nd, pad=3 - nd))
    return windows


def _kernel_call(plan: ConvReducePlan, partials: bool) -> list[str]:
    call = ["y", "out", "part"]
    if plan.norm is not None:
        call += ["nmean", "nrstd"]
    call += [leaf.arg for leaf in plan.leaves]
    call += ["n_chan", "n_grid", "n_tiles", *(["tiles_per_program"] if partials else [])]
    call.append("*[d for size in sizes for d in size]")
    if plan.pools:
        call.append("*[v for k, st, p, d, div, cip in windows for v in (*st, *p, *d, div)]")
    if plan.norm is not None and plan.norm.op == "nn_group_norm":
        call += ["num_groups", "n_chan // num_groups"]
    return call + [s.arg for s in plan.scalars]


def _kernel_constants(plan: ConvReducePlan, stem: str) -> list[str]:
    consts = []
    for j in range(len(plan.pools)):
        consts.append(
            f"K{j + 1}D=windows[{j}][0][0], K{j + 1}H=windows[{j}][0][1], "
            f"K{j + 1}W=windows[{j}][0][2], CIP{j + 1}=windows[{j}][5]"
        )
    return [*consts, "C_PAD=c_pad", "BLOCK_S=block_s", f"num_warps=NUM_WARPS_{stem.upper()}"]


def _finish_launch(plan: ConvReducePlan, finish: str | None) -> str:
    if not finish:
        return ""
    call = ["part", "out", *(leaf.arg for leaf in plan.leaves), "n_chan", "n_grid", "n_tiles"]
    call += [s.arg for s in plan.scalars]
    return template.fill(_FINISH, finish=finish, call=", ".join(call))
