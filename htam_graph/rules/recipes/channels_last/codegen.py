"""The layout-restoring epilogue of `library_offload.channels_last_conv`: kernel and launcher text.

The conv output `y` is channels-last (N, C, *spatial with channels innermost); the task's output is contiguous
NCHW / NCDHW. One program owns a [BLOCK_S, BLOCK_C] tile of one image: it loads the tile from `y` along the
channels (contiguous there), applies the elementwise epilogue in fp32 and stores the tile along the spatial
positions (contiguous in the output), so the layout change costs no pass of its own: Triton stages the tile
through shared memory between the two coalesced accesses. The same index arithmetic serves 2D and 3D convs
(the spatial dims are flattened into S). Per-channel operands are read at the channel index; other broadcast
operands at the flat NCHW index through the launcher-computed `(inner, size)` of
`fused_elementwise.BROADCAST_LAYOUT_SOURCE`; other full-shape operands are read contiguous.
"""

from __future__ import annotations

from htam_graph.rules.base import KernelConfig
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

__all__ = ["layout_kernel_source", "layout_launcher_source", "layout_constants"]

BLOCK_C_MAX = 32  # channels per tile: 128 bytes of fp32, one full cache line per spatial position


def layout_constants(kernel_name: str, config: KernelConfig) -> list[str]:
    """Module-level tile constants the launcher reads (what a tuning recipe would change)."""
    limit = ("BLOCK_C_MAX", BLOCK_C_MAX, "channels per tile at most (contiguous in the conv output)")
    return tile_constants(kernel_name, config, "[BLOCK_S, BLOCK_C]", limit)


# The kernel: one program reads a [BLOCK_S, BLOCK_C] tile along the channels, writes it along the positions.
_KERNEL = '''\
@triton.jit
def $name(
    $params
):
    """Reads the conv output channels-last, $what in fp32, writes contiguous NCHW.

    One program: a [BLOCK_S, BLOCK_C] tile (spatial positions x channels) of one image.
    """
    pid = tl.program_id(0)
    if INDEX_64:  # more than 2**31 elements: 64-bit offsets
        pid = pid.to(tl.int64)
    tile_s = pid % n_tiles_s
    tile_c = (pid // n_tiles_s) % n_tiles_c
    n = pid // (n_tiles_s * n_tiles_c)
    s = tile_s * BLOCK_S + tl.arange(0, BLOCK_S)[:, None]  # flattened spatial position
    c = tile_c * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]  # channel
    mask = (s < S) & (c < C)
    nchw = (n * C + c) * S + s  # flat index in the contiguous output (contiguous along s)
    if Y_CHANNELS_LAST:
        y_index = (n * S + s) * C + c  # channels innermost: contiguous along c
    else:
        y_index = nchw
    # operands, each loaded once and widened to fp32
    $loads
    $body
'''


def layout_kernel_source(
    region: Region, conv_ref: str, kernel_name: str, per_channel: frozenset[str] = frozenset()
) -> tuple[str, frozenset[str]]:
    """The @triton.jit kernel text and the helper names it calls. Raises NotApplicable on unsupported ops.

    `per_channel`: broadcast leaves (by graph name) that vary along the channel dim only (a `(C, 1, 1)` bias);
    they are loaded once per tile column at index `c` instead of through the flat-index arithmetic.
    """
    vars_: dict[str, str] = {leaf.ref: leaf.arg for leaf in region.leaves}
    scalar_args = {s.path: s.arg for s in region.scalars}
    render = operand_renderer(vars_, scalar_args)
    params = [f"{leaf.arg}_ptr" for leaf in region.leaves] + ["out_ptr", "C", "S", "n_tiles_s", "n_tiles_c"]
    params += [layout_params(leaf) for leaf in region.leaves if flat_broadcast(leaf, per_channel)]
    params += [s.arg for s in region.scalars]
    params += ["Y_CHANNELS_LAST: tl.constexpr", "BLOCK_S: tl.constexpr", "BLOCK_C: tl.constexpr"]
    params += ["INDEX_64: tl.constexpr"]
    body, helpers = region_body(region, render, vars_, scalar_args, "nchw")
    text = template.fill(
        _KERNEL,
        name=kernel_name,
        params=[f"{p}," for p in params],
        what=f"applies {region.describe()}" if region.nodes else "copies it",
        loads=[_operand_load(leaf, conv_ref, per_channel) for leaf in region.leaves],
        body=body,
    )
    return text, helpers


def _operand_load(leaf: Leaf, conv_ref: str, per_channel: frozenset[str]) -> str:
    """The conv output at its (maybe channels-last) index, a per-channel operand at the channel, a broadcast
    one through its layout, a full-shape one at the NCHW index."""
    mask = "mask"
    if leaf.ref == conv_ref:
        index = "y_index"
    elif leaf.ref in per_channel:
        index, mask = "c", "c < C"
    elif leaf.broadcast:
        index = f"(nchw // {leaf.arg}_inner) % {leaf.arg}_size"
    else:
        index = "nchw"
    return f"{leaf.arg} = tl.load({leaf.arg}_ptr + {index}, mask={mask}, other=0.0).to(tl.float32)"


# The launcher: the conv output's layout, operand checks, the NCHW output, tile shape and one launch.
_LAUNCHER = '''\
def $name($signature) -> torch.Tensor:
    """Launch $kernel: `$conv` may be channels-last; the result is contiguous."""
    out_shape = torch.broadcast_shapes($shapes)
    memory_format = torch.channels_last if $conv.dim() == 4 else torch.channels_last_3d
    channels_last = $conv.is_contiguous(memory_format=memory_format)
    if not channels_last:  # e.g. a CPU conv that returned NCHW: read it as such
        $conv = $conv.contiguous()
    $operands
    out = torch.empty(out_shape, device=$conv.device, dtype=$conv.dtype)
    if out.numel() == 0:
        return out
    n_images, channels, spatial = out.shape[0], out.shape[1], math.prod(out.shape[2:])
    block_c = min(BLOCK_C_MAX_$stem, triton.next_power_of_2(channels))
    block_s = max(BLOCK_$stem // block_c, 1)
    n_tiles_s, n_tiles_c = triton.cdiv(spatial, block_s), triton.cdiv(channels, block_c)
    grid = (n_images * n_tiles_s * n_tiles_c,)
    # masked lanes of the last tiles index past the end: leave room for them in the int32 check
    pad = (block_c + 1) * spatial + (block_s + 1) * channels + block_c
    index_64 = out.numel() + pad > 2**31 - 1
    $kernel[grid](
        $args,
        Y_CHANNELS_LAST=channels_last,
        BLOCK_S=block_s,
        BLOCK_C=block_c,
        INDEX_64=index_64,
        num_warps=NUM_WARPS_$stem,
    )
    return out
'''

_PER_CHANNEL_CHECK = """\
spatial_dims = $arg.shape[2 - len(out_shape) :]  # read at the channel index alone
if $arg.dim() < len(out_shape) - 1 or $arg.numel() != out_shape[1] or any(d != 1 for d in spatial_dims):
    raise ValueError(f"$arg is not per-channel: {tuple($arg.shape)}")
"""


def layout_launcher_source(
    region: Region,
    conv_ref: str,
    launcher_name: str,
    kernel_name: str,
    per_channel: frozenset[str] = frozenset(),
) -> str:
    """The Python function that checks layouts, allocates the NCHW output and launches the kernel."""
    conv_arg = next(leaf.arg for leaf in region.leaves if leaf.ref == conv_ref)
    tensors = [leaf.arg for leaf in region.leaves]
    scalars = region.scalars
    args = [*tensors, "out", "channels", "spatial", "n_tiles_s", "n_tiles_c"]
    args += [layout_params(leaf) for leaf in region.leaves if flat_broadcast(leaf, per_channel)]
    args += [s.arg for s in scalars]
    return template.fill(
        _LAUNCHER,
        name=launcher_name,
        signature=", ".join([f"{t}: torch.Tensor" for t in tensors] + [f"{s.arg}: float" for s in scalars]),
        kernel=kernel_name,
        conv=conv_arg,
        shapes=", ".join(t + ".shape" for t in tensors),
        operands=[line for leaf in region.leaves for line in _prepare_operand(leaf, conv_arg, per_channel)],
        stem=kernel_stem(kernel_name),
        args=", ".join(args),
    )


def _prepare_operand(leaf: Leaf, conv_arg: str, per_channel: frozenset[str]) -> list[str]:
    """The operand's shape check (full or per-channel) or its broadcast layout; contiguous (but the conv
    output, whose layout the kernel reads as it is)."""
    return prepare_operand(leaf, per_channel, _PER_CHANNEL_CHECK, contiguous=leaf.arg != conv_arg)
