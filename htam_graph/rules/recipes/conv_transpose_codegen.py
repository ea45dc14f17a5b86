"""The phase-writing epilogue of `algebraic_rewrite.conv_transpose_as_conv`: Triton kernel and launcher text.

Each output phase r of the transposed conv is a separate forward-conv result y_r (N, C, M1, M2, M3) holding the
outputs o = r + stride * m; it may be strided (a sliced conv output, or a stride-0 view of zeros for a phase no
tap reaches). One launch per phase reads y_r once, adds the conv bias (the convs run without it: cuDNN would add
it in a pass of its own), applies the elementwise epilogue in fp32 and writes its outputs of the final
contiguous result, so every output byte is written once and the interleave costs no pass of its own. 1D and 2D
convs are viewed as 3D with leading size-1 dims. One program owns a [BLOCK_R, BLOCK_W] tile: BLOCK_R rows
(n, c, m1, m2), decomposed once per row, by BLOCK_W positions m3 along the innermost dim (contiguous in y_r;
spaced `stride` apart in the output). Per-channel operands are read at the row's channel; other broadcast
operands at the flat output index through `broadcast_layout`; full-shape operands at the output index.
"""

from __future__ import annotations

from htam_graph.rules.base import KernelConfig, NotApplicable
from htam_graph.rules.fused_elementwise import Leaf, Region, identifier, operand_renderer
from htam_graph.rules.triton_math import emit_op

__all__ = ["phase_constants", "phase_kernel_source", "phase_launcher_source"]

# names the kernel and the launcher use for themselves: an operand may not be called so
_RESERVED = frozenset(
    {
        "pid", "tile_w", "tile_r", "rows", "t", "c", "n", "row_mask", "mask", "y_index", "out_row", "out_index",
        "C", "M1", "M2", "M3", "L1", "L2", "L3", "r1", "r2", "r3", "s1", "s2", "s3", "n_rows", "n_tiles_w",
        "phases", "out_sizes", "stride", "first", "out_shape", "out", "lead", "sizes", "steps", "block",
        "phase", "y", "n_images", "conv_bias", "HAS_BIAS", "channels", "m1", "m2", "m3", "starts", "block_w", "block_r", "grid",
        "reach", "index_64", "size", "st", "d", "_", "torch", "triton", "tl", "math", "broadcast_layout",
    }
)  # fmt: skip


def phase_constants(kernel_name: str, config: KernelConfig) -> list[str]:
    """Module-level tile constants the launcher reads (what a tuning recipe would change)."""
    stem = kernel_name.upper().removesuffix("_KERNEL")
    return [
        f"BLOCK_{stem} = {config.block}  # phase elements per [BLOCK_R, BLOCK_W] tile",
        f"NUM_WARPS_{stem} = {config.num_warps}",
    ]


def phase_kernel_source(
    region: Region, conv_ref: str, kernel_name: str, per_channel: frozenset[str]
) -> tuple[str, frozenset[str]]:
    """The @triton.jit kernel text and the helper names it calls. Raises NotApplicable on unsupported ops."""
    vars_: dict[str, str] = {leaf.ref: leaf.arg for leaf in region.leaves}
    scalar_args = {s.path: s.arg for s in region.scalars}
    clash = (set(vars_.values()) | set(scalar_args.values())) & _RESERVED
    if clash:
        raise NotApplicable(f"operand names clash with the generated code's names: {sorted(clash)}")

    render = operand_renderer(vars_, scalar_args)

    params = [f"{leaf.arg}_ptr" for leaf in region.leaves] + ["conv_bias_ptr", "out_ptr"]
    params += ["C", "M1", "M2", "M3", "sy_n", "sy_c", "sy_1", "sy_2", "sy_3", "L1", "L2", "L3"]
    params += ["r1", "r2", "r3", "s1", "s2", "s3", "n_rows", "n_tiles_w"]
    params += [_layout_params(leaf) for leaf in region.leaves if _flat_broadcast(leaf, per_channel)]
    params += [s.arg for s in region.scalars]
    params += ["HAS_BIAS: tl.constexpr", "BLOCK_R: tl.constexpr", "BLOCK_W: tl.constexpr"]
    params += ["INDEX_64: tl.constexpr"]
    what = f"applies {region.describe()} in fp32" if region.nodes else "copies it"
    lines = [
        "@triton.jit",
        f"def {kernel_name}(",
        *(f"    {p}," for p in params),
        "):",
        f'    """Reads one phase y_r of the transposed conv, {what}, writes its outputs o = r + s * m.',
        "",
        "    One program: BLOCK_R rows (n, c, m1, m2) x BLOCK_W positions m3 of the phase.",
        '    """',
        "    pid = tl.program_id(0)",
        "    if INDEX_64:  # more than 2**31 elements: 64-bit offsets",
        "        pid = pid.to(tl.int64)",
        "    tile_w = pid % n_tiles_w",
        "    tile_r = pid // n_tiles_w",
        "    rows = tile_r * BLOCK_R + tl.arange(0, BLOCK_R)",
        "    m3 = tile_w * BLOCK_W + tl.arange(0, BLOCK_W)",
        "    # the row decomposition is per row, not per element",
        "    m2 = rows % M2",
        "    t = rows // M2",
        "    m1 = t % M1",
        "    t = t // M1",
        "    c = t % C",
        "    n = t // C",
        "    row_mask = rows < n_rows",
        "    mask = row_mask[:, None] & (m3 < M3)[None, :]",
        "    y_index = (n * sy_n + c * sy_c + m1 * sy_1 + m2 * sy_2)[:, None] + (m3 * sy_3)[None, :]",
        "    out_row = ((n * C + c) * L1 + r1 + s1 * m1) * L2 + r2 + s2 * m2",
        "    out_index = out_row[:, None] * L3 + (r3 + s3 * m3)[None, :]",
        "    # operands, each loaded once and widened to fp32",
    ]
    for leaf in region.leaves:
        if leaf.ref in per_channel:
            lines.append(
                f"    {leaf.arg} = tl.load({leaf.arg}_ptr + c, mask=row_mask, other=0.0).to(tl.float32)[:, None]"
            )
            continue
        if leaf.ref == conv_ref:
            index = "y_index"
        elif leaf.broadcast:
            index = f"(out_index // {leaf.arg}_inner) % {leaf.arg}_size"
        else:
            index = "out_index"
        lines.append(
            f"    {leaf.arg} = tl.load({leaf.arg}_ptr + {index}, mask=mask, other=0.0).to(tl.float32)"
        )
        if leaf.ref == conv_ref:  # the conv bias, added here once instead of in a pass of its own
            lines += [
                "    if HAS_BIAS:",
                f"        {leaf.arg} += tl.load(conv_bias_ptr + c, mask=row_mask, other=0.0).to(tl.float32)[:, None]",
            ]
    helpers: set[str] = set()
    for node in region.nodes:
        emitted = emit_op(node, render)
        helpers |= emitted.helpers
        var = identifier(f"v_{node.name}", set(vars_.values()) | set(scalar_args.values()))
        vars_[node.name] = var
        lines.append(f"    # {node.op}  ({node.origin})")
        lines.append(f"    {var} = {emitted.expr}")
    result = vars_[region.output]
    lines.append(f"    tl.store(out_ptr + out_index, {result}.to(out_ptr.dtype.element_ty), mask=mask)")
    return "\n".join(lines) + "\n", frozenset(helpers)


def phase_launcher_source(
    region: Region, conv_ref: str, launcher_name: str, kernel_name: str, per_channel: frozenset[str]
) -> str:
    """The Python function that allocates the output and launches the kernel once per phase."""
    stem = kernel_name.upper().removesuffix("_KERNEL")
    others = [leaf for leaf in region.leaves if leaf.ref != conv_ref]
    signature = ", ".join(
        ["phases: list[tuple[tuple[int, ...], torch.Tensor]]", "out_sizes: tuple[int, ...]"]
        + ["stride: tuple[int, ...]", "conv_bias: torch.Tensor | None"]
        + [f"{leaf.arg}: torch.Tensor" for leaf in others]
        + [f"{s.arg}: float" for s in region.scalars]
    )
    lines = [
        f"def {launcher_name}({signature}) -> torch.Tensor:",
        f'    """Launch {kernel_name} once per phase: together they write every output element once."""',
        "    first = phases[0][1]",
        "    out_shape = torch.Size((first.shape[0], first.shape[1], *out_sizes))",
    ]
    for leaf in others:
        if not leaf.broadcast:
            lines.append(f"    if {leaf.arg}.shape != out_shape:")
            lines.append(
                f'        raise ValueError(f"{leaf.arg} has shape {{tuple({leaf.arg}.shape)}}, '
                f'expected {{tuple(out_shape)}}")'
            )
        lines.append(f"    {leaf.arg} = {leaf.arg}.contiguous()")
        if leaf.ref in per_channel:
            lines.append(
                f"    if {leaf.arg}.numel() != out_shape[1] or any(d != 1 for d in {leaf.arg}.shape[2 - len(out_shape) :]):"
            )
            lines.append(
                f'        raise ValueError(f"{leaf.arg} is not per-channel: {{tuple({leaf.arg}.shape)}}")'
            )
        elif leaf.broadcast:
            lines.append(
                f"    {leaf.arg}_inner, {leaf.arg}_size = broadcast_layout({leaf.arg}.shape, out_shape)"
            )
    lines += [
        "    out = torch.empty(out_shape, device=first.device, dtype=first.dtype)",
        "    if out.numel() == 0:",
        "        return out",
        "    lead = 3 - len(out_sizes)  # 1D and 2D convs are viewed as 3D with leading size-1 dims",
        "    sizes, steps = (1,) * lead + tuple(out_sizes), (1,) * lead + tuple(stride)",
        f"    block = BLOCK_{stem}",
        "    for phase, y in phases:",
        "        for _ in range(lead):",
        "            y = y.unsqueeze(2)",
        "        n_images, channels, m1, m2, m3 = y.shape",
        "        starts = (0,) * lead + tuple(phase)",
        "        block_w = min(block, triton.next_power_of_2(m3))",
        "        block_r = max(block // block_w, 1)",
        "        n_rows = n_images * channels * m1 * m2",
        "        n_tiles_w = triton.cdiv(m3, block_w)",
        "        grid = (triton.cdiv(n_rows, block_r) * n_tiles_w,)",
        "        # masked lanes of the last tiles index past the end: leave room for them in the int32 check",
        "        reach = sum((size + 1) * abs(st) for size, st in zip(y.shape, y.stride()))",
        "        index_64 = max(out.numel() + block * max(steps), reach + block) > 2**31 - 1",
    ]
    args = [*("y" if leaf.ref == conv_ref else leaf.arg for leaf in region.leaves)]
    args += ["y if conv_bias is None else conv_bias", "out"]
    args += [
        "channels",
        "m1",
        "m2",
        "m3",
        "*y.stride()",
        "*sizes",
        "*starts",
        "*steps",
        "n_rows",
        "n_tiles_w",
    ]
    args += [_layout_params(leaf) for leaf in others if _flat_broadcast(leaf, per_channel)]
    args += [s.arg for s in region.scalars]
    lines += [
        f"        {kernel_name}[grid](",
        f"            {', '.join(args)},",
        "            HAS_BIAS=conv_bias is not None,",
        "            BLOCK_R=block_r,",
        "            BLOCK_W=block_w,",
        "            INDEX_64=index_64,",
        f"            num_warps=NUM_WARPS_{stem},",
        "        )",
        "    return out",
    ]
    return "\n".join(lines) + "\n"


def _flat_broadcast(leaf: Leaf, per_channel: frozenset[str]) -> bool:
    """A broadcast leaf read through `(out_index // inner) % size`."""
    return leaf.broadcast and leaf.ref not in per_channel


def _layout_params(leaf: Leaf) -> str:
    return f"{leaf.arg}_inner, {leaf.arg}_size"
