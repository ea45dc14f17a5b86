"""What the tiled kernels that read a conv output and apply its epilogue share (channels-last re-layout,
transposed-conv phases, depthwise conv): the epilogue region over the conv output, their module-level tile
constants and the launcher lines that prepare one epilogue operand.

Each of those kernels owns a 2D tile of the output and reads per-channel operands (a `(C, 1, 1)` bias) at
the channel index, other broadcast operands through `broadcast_layout`, full-shape ones at the output index;
only the tile's shape and the per-channel check differ, so they are arguments here.
"""

from __future__ import annotations

from htam_graph.rules.base import KernelConfig, NotApplicable
from htam_graph.rules.codegen import template
from htam_graph.rules.codegen.fused_elementwise import (
    FULL_SHAPE_CHECK,
    Leaf,
    Region,
    build_region,
    forward_leaf_exprs,
    kernel_stem,
)
from htam_graph.rules.ops import OpGraph, OpNode

__all__ = ["epilogue_region", "tile_constants", "prepare_operand"]


def epilogue_region(
    graph: OpGraph, nodes: tuple[OpNode, ...], conv: OpNode, conv_var: str, failure: str
) -> Region:
    """The fused region of the elementwise `nodes` after `conv`, which the forward holds in `conv_var`;
    NotApplicable, its reason prefixed by `failure`, when they cannot be fused. Whether the region reads the
    conv output at the output's shape (`Region.reads_whole`) is the caller's check."""
    leaf_exprs = forward_leaf_exprs(graph)
    leaf_exprs[conv.name] = conv_var
    try:
        return build_region(graph, nodes, leaf_exprs)
    except NotApplicable as e:
        raise NotApplicable(f"{failure}: {e}") from e


def tile_constants(
    kernel_name: str, config: KernelConfig, tile: str, *limits: tuple[str, int, str]
) -> list[str]:
    """Module-level tile constants the launcher reads (what a tuning recipe changes): BLOCK_<stem>, output
    elements per `tile` (e.g. `[BLOCK_S, BLOCK_C]`), each of `limits` as (name, value, comment) with the
    stem appended to its name, then NUM_WARPS_<stem>."""
    stem = kernel_stem(kernel_name)
    return [
        f"BLOCK_{stem} = {config.block}  # output elements per {tile} tile",
        *(f"{name}_{stem} = {value}  # {comment}" for name, value, comment in limits),
        f"NUM_WARPS_{stem} = {config.num_warps}",
    ]


def prepare_operand(
    leaf: Leaf, per_channel: frozenset[str], per_channel_check: str, *, contiguous: bool = True
) -> list[str]:
    """A launcher's lines for one epilogue operand: its full-shape check (not for a broadcast one), a
    contiguous copy (unless `contiguous` is False: an operand whose layout the kernel reads as it is), then
    `per_channel_check` (a template over `$arg`) for a per-channel operand or the `broadcast_layout` of
    another broadcast one."""
    lines = [] if leaf.broadcast else [template.fill(FULL_SHAPE_CHECK, arg=leaf.arg)]
    if contiguous:
        lines.append(f"{leaf.arg} = {leaf.arg}.contiguous()")
    if leaf.ref in per_channel:
        lines.append(template.fill(per_channel_check, arg=leaf.arg))
    elif leaf.broadcast:
        lines.append(f"{leaf.arg}_inner, {leaf.arg}_size = broadcast_layout({leaf.arg}.shape, out_shape)")
    return lines
