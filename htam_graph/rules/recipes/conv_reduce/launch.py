"""The Python side of `fusion.conv_reduction_epilogue`: the launcher of the channel-tile kernel (sizes, pool
windows and partial-reduction split read at run time) and the module-level constants a tuning recipe
varies."""

from __future__ import annotations

from htam_graph.rules.base import KernelConfig
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


def launcher_source(plan: ConvReducePlan, stem: str, kernel: str, finish: str | None) -> str:
    """The Python launcher: sizes and pool windows from the tensors and modules, output, grid, launches."""
    up = stem.upper()
    nd = plan.rank - 2
    args = ["y: torch.Tensor"]
    if plan.norm is not None:
        args += ["nmean: torch.Tensor", "nrstd: torch.Tensor"]
    args += [f"{leaf.arg}: torch.Tensor" for leaf in plan.leaves]
    args += [f"{s.arg}: float" for s in plan.scalars]
    args += [f"pool{j + 1}: nn.Module" for j, p in enumerate(plan.pools) if plan.window_dims(p) is None]
    if plan.norm is not None and plan.norm.op == "nn_group_norm":
        args.append("num_groups: int")
    lines = [
        f"def fused_{stem}({', '.join(args)}) -> torch.Tensor:",
        f'    """Launch {kernel}{" and " + finish if finish else ""}; every size is read at run time."""',
        f"    if y.dim() != {plan.rank}:",
        f'        raise ValueError(f"expected a {plan.rank}-d conv output, got shape {{tuple(y.shape)}}")',
        "    y = y.contiguous()",
        "    n_batch, n_chan = y.shape[0], y.shape[1]",
        "    if n_chan > MAX_CHANNELS:",
        '        raise ValueError(f"{n_chan} channels do not fit one program (at most {MAX_CHANNELS})")',
        f"    sizes = [(1,) * {3 - nd} + tuple(y.shape[2:])]  # spatial sizes per pool level, 3-d padded",
    ]
    if plan.pools:
        lines.append("    windows = []")
    for j, level in enumerate(plan.pools):
        dims = plan.window_dims(level)
        if dims is not None:
            lines += [
                f"    # {level.op} over (3-d padded) spatial dims {dims}: a window spanning them, no padding",
                f"    kernel = tuple(n if d in {dims} else 1 for d, n in enumerate(sizes[-1]))",
                "    windows.append((kernel, (1, 1, 1), (0, 0, 0), (1, 1, 1), 0, True))",
                f"    sizes.append(tuple(1 if d in {dims} else n for d, n in enumerate(sizes[-1])))",
            ]
            continue
        lines += [
            f"    kernel, stride, padding, dilation, out_sizes = pool_window(pool{j + 1}, {nd}, "
            f"sizes[-1][{3 - nd}:])",
            f"    windows.append((kernel, stride, padding, dilation, int(getattr(pool{j + 1}, "
            f"'divisor_override', None) or 0), bool(getattr(pool{j + 1}, 'count_include_pad', True))))",
            "    sizes.append(out_sizes)",
        ]
    lines += [
        f"    grid_sizes = sizes[-1][{3 - nd}:]",
        "    n_grid = math.prod(grid_sizes)",
    ]
    for leaf in plan.leaves:
        want = "n_chan" if leaf.per_channel else "1"
        lines += [
            f"    {leaf.arg} = {leaf.arg}.contiguous()",
            f"    if {leaf.arg}.numel() != {want}:",
            f'        raise ValueError(f"{leaf.arg} has {{{leaf.arg}.numel()}} elements, '
            f'expected {{{want}}}")',
        ]
    lines += [
        "    c_pad = triton.next_power_of_2(n_chan)",
        f"    block_s = max(1, min(triton.next_power_of_2(n_grid), TILE_{up} // c_pad))",
        "    while block_s > 16 and n_batch * triton.cdiv(n_grid, block_s) < TARGET_PROGRAMS:",
        "        block_s //= 2  # small grids: narrower tiles, so that every SM gets programs",
        "    n_tiles = triton.cdiv(n_grid, block_s)",
        f"    out = torch.empty({_out_shape(plan)}, device=y.device, dtype=y.dtype)",
        "    if out.numel() == 0 or n_grid == 0:",
        "        return out",
    ]
    if finish:
        lines += [
            "    # each program folds several tiles into one partial per channel (few partials to merge)",
            "    tiles_per_program = max(1, n_batch * n_tiles // (4 * TARGET_PROGRAMS))",
            "    n_tiles = triton.cdiv(n_tiles, tiles_per_program)",
            "    part = torch.empty(n_batch * n_tiles * c_pad, device=y.device, dtype=torch.float32)",
        ]
    else:
        lines.append("    part = out  # no spatial partials")
    call = ["y", "out", "part"]
    if plan.norm is not None:
        call += ["nmean", "nrstd"]
    call += [leaf.arg for leaf in plan.leaves]
    call += ["n_chan", "n_grid", "n_tiles", *(["tiles_per_program"] if finish else [])]
    call.append("*[d for size in sizes for d in size]")
    if plan.pools:
        call.append("*[v for k, st, p, d, div, cip in windows for v in (*st, *p, *d, div)]")
    if plan.norm is not None and plan.norm.op == "nn_group_norm":
        call += ["num_groups", "n_chan // num_groups"]
    call += [s.arg for s in plan.scalars]
    consts = []
    for j in range(len(plan.pools)):
        consts.append(
            f"K{j + 1}D=windows[{j}][0][0], K{j + 1}H=windows[{j}][0][1], "
            f"K{j + 1}W=windows[{j}][0][2], CIP{j + 1}=windows[{j}][5]"
        )
    consts += ["C_PAD=c_pad", "BLOCK_S=block_s", f"num_warps=NUM_WARPS_{up}"]
    lines += [
        f"    {kernel}[(n_tiles, n_batch)](",
        f"        {', '.join(call)},",
        *(f"        {c}," for c in consts),
        "    )",
    ]
    if finish:
        fcall = ["part", "out", *(leaf.arg for leaf in plan.leaves), "n_chan", "n_grid", "n_tiles"]
        fcall += [s.arg for s in plan.scalars]
        lines += [
            f"    {finish}[(n_batch,)](",
            f"        {', '.join(fcall)},",
            "        C_PAD=c_pad, BLOCK_T=max(1, min(triton.next_power_of_2(n_tiles), "
            "4096 // c_pad)), num_warps=4,",
            "    )",
        ]
    lines.append("    return out")
    return "\n".join(lines) + "\n"
