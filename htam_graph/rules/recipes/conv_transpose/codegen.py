"""The phase-writing epilogue of `algebraic_rewrite.conv_transpose_as_conv`: Triton kernel and launcher text.

Each output phase r of the transposed conv is a separate forward-conv result y_r (N, C, M1, M2, M3) holding
the outputs o = r + stride * m; it may be strided (a sliced conv output, or a stride-0 view of zeros for a
phase no tap reaches), and phases differ in M3 when the output length is not a multiple of the stride. The
launcher launches the kernel once per ROW phase (r1, r2) (stride1 * stride2 launches; one for 1D); that launch
writes every output row (n, c, o1 = r1 + s1 * m1, o2 = r2 + s2 * m2) in full, left to right: one program owns
a [BLOCK_R, BLOCK_W] tile of BLOCK_R such rows (decomposed once per row) by BLOCK_W CONSECUTIVE output
positions o3. Position o3 lies in phase r3 = o3 % S3 at m3 = o3 // S3 (S3, the innermost stride, is a
constexpr: no runtime division); the kernel holds PHASE_SLOTS phase pointers (y_(r1, r2, 0), ...) and loads
each element once, through the slot load whose mask selects its r3. The bias and the elementwise epilogue
apply in fp32 and the store is contiguous along o3: full 32-byte sectors, where one launch per phase left
every other element of each sector to another launch (a read-modify-write of every sector on ECC memory). An
innermost stride above PHASE_SLOTS first interleaves its phases into one tensor (an extra pass, correct for
any stride).

One launch per row phase rather than one overall: a single launch would need all stride1 * stride2 * S3 slots
(8 for a 3D stride-2 conv) and one masked load per slot per element; per row phase, each element costs S3.
What remains partial: output rows o2 and o2 + 1 come from different launches, so when a row (L3 elements) is
not a multiple of 32 bytes the sector at each end of a row may be shared with a row of another launch.
Per-channel operands are read at the row's channel; other broadcast operands at the flat output index through
`broadcast_layout`; full-shape operands at the output index. 1D and 2D convs are viewed as 3D.
"""

from __future__ import annotations

from htam_graph.rules.base import KernelConfig, NotApplicable
from htam_graph.rules.codegen import template
from htam_graph.rules.codegen.conv_epilogue import tile_constants
from htam_graph.rules.codegen.fused_elementwise import (
    Leaf,
    Region,
    flat_broadcast,
    kernel_stem,
    layout_params,
    operand_renderer,
    prepare_operand,
    region_body,
)

__all__ = [
    "PHASE_SLOTS",
    "ROW_PHASES_SOURCE",
    "phase_constants",
    "phase_kernel_source",
    "phase_launcher_source",
]

PHASE_SLOTS = 4  # phase pointers of the kernel: innermost strides up to this are read in place
_SLOT_STRIDES = ("sn", "sc", "s1", "s2", "s3")  # per slot: the phase tensor's strides (N, C, M1, M2, M3)
_SLOT_NAMES = {
    f"phase{j}{suffix}"
    for j in range(PHASE_SLOTS)
    for suffix in ("", "_ptr", *(f"_{s}" for s in _SLOT_STRIDES))
}

# names the kernel and the launcher use for themselves: an operand may not be called so
_RESERVED = frozenset(
    {
        "pid", "tile_w", "tile_r", "rows", "t", "c", "n", "row_mask", "mask", "out_row", "out_index", "o3",
        "in_phase", "y_row", "y_phase",
        "C", "M1", "M2", "L1", "L2", "L3", "r1", "r2", "r3", "s1", "s2", "s3", "S3", "n_rows", "n_tiles_w",
        "phases", "out_sizes", "stride", "first", "out_shape", "out", "lead", "sizes", "steps", "block",
        "phase", "y", "ys", "n_images", "conv_bias", "HAS_BIAS", "channels", "m1", "m2", "m3", "block_w",
        "block_r",
        "grid", "reach", "index_64", "size", "st", "d", "j", "slots", "slot_args", "slot_s3", "by_phase",
        "row_phase_tensors", "interleave_phases", "PHASE_SLOTS", "torch", "triton", "tl", "math",
        "broadcast_layout", *_SLOT_NAMES,
    }
)  # fmt: skip

# Emitted into every generated file: the launcher-side selection of one row phase's phase tensors.
_ROW_PHASES = '''\
PHASE_SLOTS = $slots  # phase pointers of the kernel: innermost strides up to this are read in place


def row_phase_tensors(
    by_phase: dict[tuple[int, ...], torch.Tensor],
    r1: int,
    r2: int,
    sizes: tuple[int, int, int],
    steps: tuple[int, int, int],
) -> list[torch.Tensor]:
    """The phases (r1, r2, r3), r3 = 0, 1, ..., of row phase (r1, r2), as 5D tensors (N, C, M1, M2, M3).

    Only the r3 < L3 exist (a shorter output dim has no element in the others). Phase r3 holds the outputs
    o3 = r3 + s3 * m3 < L3: its M3 is ceil((L3 - r3) / s3), so phases differ in length when s3 does not divide
    L3; (M1, M2) are those of (r1, r2). Anything else is a bug upstream: raise rather than write garbage.
    """
    (l1, l2, l3), (s1, s2, s3) = sizes, steps
    ys = []
    for r3 in range(min(s3, l3)):
        y = by_phase.get((r1, r2, r3))
        if y is None:
            raise ValueError(f"phase {(r1, r2, r3)} is missing from the phase results")
        counts = (-(-(l1 - r1) // s1), -(-(l2 - r2) // s2), -(-(l3 - r3) // s3))
        if tuple(y.shape[2:]) != counts or (ys and y.shape[:2] != ys[0].shape[:2]):
            raise ValueError(f"phase {(r1, r2, r3)} has shape {tuple(y.shape)}, expected (N, C, *{counts})")
        ys.append(y)
    return ys


def interleave_phases(ys: list[torch.Tensor], s3: int, l3: int) -> torch.Tensor:
    """One tensor (N, C, M1, M2, L3) holding ys[r3] at o3 = r3 + s3 * m3: for s3 > PHASE_SLOTS (an extra \
pass)."""
    out = ys[0].new_empty((*ys[0].shape[:4], l3))
    for r3, y in enumerate(ys):
        out[..., r3::s3] = y
    return out
'''
ROW_PHASES_SOURCE = template.fill(_ROW_PHASES, slots=PHASE_SLOTS)


def phase_constants(kernel_name: str, config: KernelConfig) -> list[str]:
    """Module-level tile constants the launcher reads (what a tuning recipe would change)."""
    return tile_constants(kernel_name, config, "[BLOCK_R, BLOCK_W]")


# The kernel: one program writes a [BLOCK_R, BLOCK_W] tile of whole output rows of one row phase.
_KERNEL = '''\
@triton.jit
def $name(
    $params
):
    """Writes the output rows of row phase (r1, r2) in full: reads the conv result, adds the bias,
    $what.

    One program: BLOCK_R rows (n, c, m1, m2), i.e. output rows (n, c, r1 + s1 * m1, r2 + s2 * m2), x BLOCK_W
    consecutive output positions o3. Position o3 is in phase r3 = o3 % S3 at m3 = o3 // S3: slot r3 holds
    that phase's tensor y_(r1, r2, r3) (strides phase<r3>_*); slots >= S3 are never read.
    """
    pid = tl.program_id(0)
    if INDEX_64:  # more than 2**31 elements: 64-bit offsets
        pid = pid.to(tl.int64)
    tile_w = pid % n_tiles_w
    tile_r = pid // n_tiles_w
    rows = tile_r * BLOCK_R + tl.arange(0, BLOCK_R)
    o3 = tile_w * BLOCK_W + tl.arange(0, BLOCK_W)
    row_mask = rows < n_rows
    mask = row_mask[:, None] & (o3 < L3)[None, :]
    # lanes past the last row repeat it (masked): every index they form stays inside the tensors
    rows = tl.minimum(rows, n_rows - 1)
    # the row decomposition is per row, not per element
    m2 = rows % M2
    t = rows // M2
    m1 = t % M1
    t = t // M1
    c = t % C
    n = t // C
    r3 = o3 % S3  # S3 is a constexpr: a shift or a multiply, no runtime division
    m3 = o3 // S3
    out_row = ((n * C + c) * L1 + r1 + s1 * m1) * L2 + r2 + s2 * m2
    out_index = out_row[:, None] * L3 + o3[None, :]  # contiguous along o3: full-sector stores
    # the conv result: one load per phase slot, masked to the positions of that phase, so every element is
    # read exactly once; slot 0 (S3 == 1: every position) first, then the slots < S3 (constexpr: pruned)
    $slots
    $conv = $conv.to(tl.float32)
    if HAS_BIAS:  # the conv bias, added here once instead of in a pass of its own
        $conv += tl.load(conv_bias_ptr + c, mask=row_mask, other=0.0).to(tl.float32)[:, None]
    # operands, each loaded once and widened to fp32
    $loads
    $body
'''

# Phase slot j: the positions of phase r3 == j, read from that phase's tensor into the conv value.
_SLOT = """\
in_phase = (r3 == $j)[None, :]
y_row = n * phase${j}_sn + c * phase${j}_sc + m1 * phase${j}_s1 + m2 * phase${j}_s2
y_phase = tl.load(phase${j}_ptr + y_row[:, None] + (m3 * phase${j}_s3)[None, :], mask=mask & in_phase, \
other=0.0)
$merge
"""

_LATER_SLOT = """\
if S3 > $j:
    $slot
"""


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
    others = [leaf for leaf in region.leaves if leaf.ref != conv_ref]
    body, helpers = region_body(region, render, vars_, scalar_args, "out_index")
    text = template.fill(
        _KERNEL,
        name=kernel_name,
        params=[f"{p}," for p in _kernel_params(region, others, per_channel)],
        what=f"applies {region.describe()} in fp32" if region.nodes else "copies it",
        slots=_slot_loads(vars_[conv_ref]),
        conv=vars_[conv_ref],
        loads=[_operand_load(leaf, per_channel) for leaf in others],
        body=body,
    )
    return text, helpers


def _kernel_params(region: Region, others: list[Leaf], per_channel: frozenset[str]) -> list[str]:
    params = [f"{leaf.arg}_ptr" for leaf in others] + ["conv_bias_ptr", "out_ptr"]
    for j in range(PHASE_SLOTS):
        params += [f"phase{j}_ptr", ", ".join(f"phase{j}_{s}" for s in _SLOT_STRIDES)]
    params += ["C", "M1", "M2", "L1", "L2", "L3", "r1", "r2", "s1", "s2", "n_rows", "n_tiles_w"]
    params += [layout_params(leaf) for leaf in others if flat_broadcast(leaf, per_channel)]
    params += [s.arg for s in region.scalars]
    params += ["S3: tl.constexpr", "HAS_BIAS: tl.constexpr", "BLOCK_R: tl.constexpr", "BLOCK_W: tl.constexpr"]
    return [*params, "INDEX_64: tl.constexpr"]


def _slot_loads(conv: str) -> list[str]:
    """Slot 0 sets the conv value; each later slot (compiled only below S3) merges its positions in."""
    slots = [template.fill(_SLOT, j=0, merge=f"{conv} = y_phase")]
    for j in range(1, PHASE_SLOTS):
        slot = template.fill(_SLOT, j=j, merge=f"{conv} = tl.where(in_phase, y_phase, {conv})")
        slots.append(template.fill(_LATER_SLOT, j=j, slot=slot))
    return slots


def _operand_load(leaf: Leaf, per_channel: frozenset[str]) -> str:
    """A per-channel operand at the row's channel, a broadcast one through its layout, else at the output."""
    if leaf.ref in per_channel:
        return f"{leaf.arg} = tl.load({leaf.arg}_ptr + c, mask=row_mask, other=0.0).to(tl.float32)[:, None]"
    index = f"(out_index // {leaf.arg}_inner) % {leaf.arg}_size" if leaf.broadcast else "out_index"
    return f"{leaf.arg} = tl.load({leaf.arg}_ptr + {index}, mask=mask, other=0.0).to(tl.float32)"


# The launcher: operand checks, the output, then one launch per row phase (r1, r2).
_LAUNCHER = '''\
def $name($signature) -> torch.Tensor:
    """Launch $kernel once per row phase (r1, r2): each launch writes whole output rows."""
    first = phases[0][1]
    out_shape = torch.Size((first.shape[0], first.shape[1], *out_sizes))
    $operands
    out = torch.empty(out_shape, device=first.device, dtype=first.dtype)
    if out.numel() == 0:
        return out
    lead = 3 - len(out_sizes)  # 1D and 2D convs are viewed as 3D with leading size-1 dims
    sizes, steps = (1,) * lead + tuple(out_sizes), (1,) * lead + tuple(stride)
    by_phase = {}
    for phase, y in phases:  # 1D / 2D phase results gain the leading size-1 dims: (N, C, M1, M2, M3)
        by_phase[(0,) * lead + tuple(phase)] = y[(slice(None), slice(None), *((None,) * lead))]
    block = BLOCK_$stem
    block_w = min(block, triton.next_power_of_2(sizes[2]))
    block_r = max(block // block_w, 1)
    n_tiles_w = triton.cdiv(sizes[2], block_w)
    for r1 in range(min(steps[0], sizes[0])):
        for r2 in range(min(steps[1], sizes[1])):
            ys = row_phase_tensors(by_phase, r1, r2, sizes, steps)
            slot_s3 = steps[2]
            if slot_s3 > PHASE_SLOTS:  # more phases than the kernel has slots: interleave them first
                ys, slot_s3 = [interleave_phases(ys, slot_s3, sizes[2])], 1
            n_images, channels, m1, m2 = ys[0].shape[:4]
            n_rows = n_images * channels * m1 * m2
            grid = (triton.cdiv(n_rows, block_r) * n_tiles_w,)
            # the kernel clamps rows; masked lanes past L3 reach at most block_w positions further
            reach = max(
                sum((size - 1) * abs(st) for size, st in zip(y.shape, y.stride()))
                + (block_w + 1) * abs(y.stride(4))
                for y in ys
            )
            index_64 = max(out.numel() + block_w, reach) > 2**31 - 1
            # spare slots repeat the last phase tensor, never read: compiled out past S3, masked off past L3
            slots = [ys[min(j, len(ys) - 1)] for j in range(PHASE_SLOTS)]
            slot_args = [a for y in slots for a in (y, *y.stride())]
            $kernel[grid](
                $args
                S3=slot_s3,
                HAS_BIAS=conv_bias is not None,
                BLOCK_R=block_r,
                BLOCK_W=block_w,
                INDEX_64=index_64,
                num_warps=NUM_WARPS_$stem,
            )
    return out
'''

_PER_CHANNEL_CHECK = """\
if $arg.numel() != out_shape[1] or any(d != 1 for d in $arg.shape[2 - len(out_shape) :]):
    raise ValueError(f"$arg is not per-channel: {tuple($arg.shape)}")
"""


def phase_launcher_source(
    region: Region, conv_ref: str, launcher_name: str, kernel_name: str, per_channel: frozenset[str]
) -> str:
    """The Python function that allocates the output and launches the kernel once per row phase (r1, r2)."""
    others = [leaf for leaf in region.leaves if leaf.ref != conv_ref]
    signature = ", ".join(
        ["phases: list[tuple[tuple[int, ...], torch.Tensor]]", "out_sizes: tuple[int, ...]"]
        + ["stride: tuple[int, ...]", "conv_bias: torch.Tensor | None"]
        + [f"{leaf.arg}: torch.Tensor" for leaf in others]
        + [f"{s.arg}: float" for s in region.scalars]
    )
    return template.fill(
        _LAUNCHER,
        name=launcher_name,
        signature=signature,
        kernel=kernel_name,
        operands=[line for leaf in others for line in _prepare_operand(leaf, per_channel)],
        stem=kernel_stem(kernel_name),
        args=_launch_args(region, others, per_channel),
    )


def _prepare_operand(leaf: Leaf, per_channel: frozenset[str]) -> list[str]:
    """The operand's shape check (full or per-channel) or its broadcast layout; contiguous either way."""
    return prepare_operand(leaf, per_channel, _PER_CHANNEL_CHECK)


def _launch_args(region: Region, others: list[Leaf], per_channel: frozenset[str]) -> list[str]:
    """The kernel's arguments, one line per group."""
    groups = [
        [leaf.arg for leaf in others] + ["ys[0] if conv_bias is None else conv_bias", "out"],
        ["*slot_args"],
        ["channels", "m1", "m2", "*sizes", "r1", "r2", "steps[0]", "steps[1]", "n_rows", "n_tiles_w"],
        [layout_params(leaf) for leaf in others if flat_broadcast(leaf, per_channel)],
        [s.arg for s in region.scalars],
    ]
    return [f"{', '.join(group)}," for group in groups if group]
