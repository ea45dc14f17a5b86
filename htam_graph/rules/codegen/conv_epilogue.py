"""What the tiled kernels that read a conv output and apply its epilogue share (channels-last re-layout,
transposed-conv phases, depthwise conv): the epilogue region over the conv output and their module-level
tile constants (the launcher lines for one operand are `fused_elementwise.prepare_operand`).

Each of those kernels owns a 2D tile of the output and reads per-channel operands (a `(C, 1, 1)` bias) at
the channel index, other broadcast operands through `broadcast_layout`, full-shape ones at the output index;
only the tile's shape and the per-channel check differ, so they are arguments (here and to `prepare_operand`).
"""

from __future__ import annotations

from htam_graph.rules.base import KernelConfig, NotApplicable
from htam_graph.rules.codegen.fused_elementwise import Region, build_region, forward_leaf_exprs, kernel_stem
from htam_graph.rules.ops import OpGraph, OpNode

__all__ = ["epilogue_region", "tile_constants"]


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
