"""The Python side of a composed group's kernel: the launcher, and the layout helpers written into the file.

The launcher reads every size from its tensors at run time (the full shape is the broadcast of the leaves read
per element), computes the row layout and the broadcast layout of each leaf, picks the tile and launches.
"""

from __future__ import annotations

import textwrap

from htam_graph.rules.base import KernelConfig
from htam_graph.rules.codegen import template
from htam_graph.rules.compose.group import GROUP_COUNT, Group, Leaf, Space, layout_args
from htam_graph.rules.compose.reducers import Reduction
from htam_graph.rules.compose.stats import PARTIALS

__all__ = ["BROADCAST_BLOCKS_SOURCE", "ROW_HELPERS_SOURCE", "constants", "launcher_source"]

# Emitted into every composed file with an operand broadcast in two blocks of dims.
BROADCAST_BLOCKS_SOURCE = '''\
def broadcast_blocks(shape: torch.Size, out_shape: torch.Size) -> tuple[int, int, int, int]:
    """(inner_a, size_a, inner_b, size_b): element i of the flat output reads element
    ((i // inner_a) % size_a) * size_b + (i // inner_b) % size_b of the contiguous operand, whose non-1 dims
    (right-aligned against the output) are two blocks a and b of the output's dims (x[:, None, :] against
    [B, C, F]: a = (B,), b = (F,))."""
    padded = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    dims = [d for d, s in enumerate(padded) if s != 1]
    gaps = [any(out_shape[d] != 1 for d in range(a + 1, b)) for a, b in zip(dims, dims[1:])]
    cut = gaps.index(True)
    blocks = [dims[: cut + 1], dims[cut + 1 :]]
    for block in blocks:
        if any(padded[d] != out_shape[d] for d in range(block[0], block[-1] + 1)):
            raise ValueError(f"operand shape {tuple(shape)} is not two blocks of {tuple(out_shape)}")
    (a0, a1), (b0, b1) = ((block[0], block[-1]) for block in blocks)
    return (
        math.prod(out_shape[a1 + 1 :]), math.prod(padded[a0 : a1 + 1]),
        math.prod(out_shape[b1 + 1 :]), math.prod(padded[b0 : b1 + 1]),
    )
'''

ROW_HELPERS_SOURCE = '''\
SPLIT_TARGET_PROGRAMS = 1024  # fewer row tiles than this: split each row's reduced range across programs
MIN_TILES_PER_SPLIT = 4  # each slice folds at least this many BLOCK_R tiles


def row_split(n_tiles: int, n_red: int, block_r: int, splits: bool) -> tuple[int, int]:
    """(n_split, red_per_split): how many programs share each row's reduced range, and the length of each
    one's slice (a whole number of BLOCK_R tiles). Few long rows (a whole-tensor norm is one row) are split so
    that the GPU has work for every SM; `splits` False keeps every row whole."""
    n_split = 1
    if splits and n_tiles < SPLIT_TARGET_PROGRAMS:
        longest = n_red // (block_r * MIN_TILES_PER_SPLIT)
        n_split = max(1, min(triton.cdiv(SPLIT_TARGET_PROGRAMS, n_tiles), longest))
    red_per_split = max(1, triton.cdiv(triton.cdiv(n_red, n_split), block_r)) * block_r
    return max(1, triton.cdiv(n_red, red_per_split)), red_per_split


def row_layout(shape: torch.Size, dims: tuple[int, ...], middle: bool, groups: int) -> tuple[int, int, int]:
    """(n_keep, n_red, inner) of a reduction of `shape` over `dims` (see the kernel's docstring).

    middle: the reduced dims are adjacent (rows are (outer, inner) pairs), else the kept dims are.
    groups > 1: group norm, whose rows are the (sample, group) blocks of C // groups channels.
    """
    if groups > 1:
        if shape[1] % groups:
            raise ValueError(f"{shape[1]} channels do not split into {groups} groups")
        n_keep = shape[0] * groups
        return n_keep, math.prod(shape) // n_keep, 1
    first, last = (dims[0], dims[-1]) if middle else _kept_block(len(shape), dims)
    outer, block, inner = math.prod(shape[:first]), math.prod(shape[first : last + 1]), \
math.prod(shape[last + 1 :])
    if middle:
        return outer * inner, block, inner
    return block, outer * inner, inner


def _kept_block(rank: int, dims: tuple[int, ...]) -> tuple[int, int]:
    kept = [d for d in range(rank) if d not in dims]
    return kept[0], kept[-1]


def reduced_shape(shape: torch.Size, dims: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if d in dims else s for d, s in enumerate(shape))
    return tuple(s for d, s in enumerate(shape) if d not in dims)


def row_tiles(n_keep: int, n_red: int, inner: int, middle: bool, max_tile: int) -> tuple[int, int]:
    """(BLOCK_K, BLOCK_R): rows per program and reduced elements per tile. Memory is contiguous along the kept
    rows when the reduced block has inner dims after it, and along the reduced index otherwise."""
    if middle and inner > 1:
        block_k = min(triton.next_power_of_2(min(inner, n_keep)), 64)
        return block_k, max(1, min(triton.next_power_of_2(n_red), max_tile // block_k))
    block_r = min(triton.next_power_of_2(n_red), max_tile)
    return max(1, min(triton.next_power_of_2(n_keep), max_tile // block_r)), block_r
'''


def constants(name: str, config: KernelConfig) -> list[str]:
    """Module-level launch constants of one kernel (what a tuning recipe changes)."""
    upper = name.upper()
    return [
        f"BLOCK_{upper} = {config.block}  # elements per program (per tile for a reduction)",
        f"NUM_WARPS_{upper} = {config.num_warps}",
    ]


# The launcher: the full shape, the row layout (reductions), the output, operand layouts, the launches.
_LAUNCHER = '''\
def $name($signature) -> torch.Tensor:
    """$describe: sizes read from the tensors at run time."""
    full_shape = torch.broadcast_shapes($full_shapes)
    $row_layout
    out = torch.empty($out_shape, device=$first.device, dtype=$dtype)
    $operands
    if out.numel() == 0:
        return out
    $grid
    $launches
    return out
'''

_CALL = """\
$kernel[grid](
    $args,
    $launch
    num_warps=NUM_WARPS_$upper,
)
"""

# Rows split across programs take two launches (partial statistics, then their merge); whole rows one.
_ROW_PHASES = "for phase in ((0, 1) if n_split > 1 else (2,)):"

_ROW_LAYOUT = """\
if len(full_shape) != $rank:
    raise ValueError(f"expected a rank-$rank input, got shape {tuple(full_shape)}")
n_keep, n_red, inner = row_layout(full_shape, $dims, $middle, $groups)
row_shape = reduced_shape(full_shape, $dims, $keepdim)
"""

_FLAT_GRID = """\
n_elements = out.numel()
grid = (triton.cdiv(n_elements, BLOCK_$upper),)
"""

_ROW_GRID = """\
block_k, block_r = row_tiles(n_keep, n_red, inner, $middle, BLOCK_$upper)
n_tiles = triton.cdiv(n_keep, block_k)
n_split, red_per_split = row_split(n_tiles, n_red, block_r, $splits)
size = n_keep * n_split if n_split > 1 else 1  # partial statistics, read only when rows are split
parts = [torch.empty(size, device=out.device, dtype=torch.float32) for _ in range($n_parts)]
grid = (n_tiles * n_split,)
"""

_SHAPE_CHECK = """\
if $arg.shape != $space:
    raise ValueError(f"$arg has shape {tuple($arg.shape)}, expected {tuple($space)}")
"""


def launcher_source(group: Group, name: str, kernel_name: str) -> str:
    """The Python function that allocates the output and launches `kernel_name` over it."""
    upper = name.upper()
    leaves = list(group.leaves)
    signature = ", ".join(
        [f"{leaf.arg}: torch.Tensor" for leaf in leaves]
        + [f"{s.arg}: {'float' if s.in_kernel else 'int'}" for s in group.scalars]
    )
    full = [leaf.arg for leaf in leaves if leaf.space is Space.FULL]
    red = group.reduction
    args = [leaf.arg for leaf in leaves] + ["out"]
    args += ["n_elements"] if red is None else ["n_keep", "n_red", "inner", "n_split", "red_per_split"]
    args += [layout for leaf in leaves for layout in layout_args(leaf)]
    args += [s.arg for s in group.scalars if s.in_kernel]
    if red is None:
        grid = template.fill(_FLAT_GRID, upper=upper)
        launch = [f"BLOCK=BLOCK_{upper}", f"INDEX_64=n_elements + BLOCK_{upper} > 2**31 - 1"]
    else:
        grid = template.fill(
            _ROW_GRID,
            middle=red.middle_reduced,
            upper=upper,
            splits=red.target is None,  # cross-entropy's target statistics are not merged across slices
            n_parts=len(PARTIALS[red.family]),
        )
        args.append("*parts")
        launch = [
            "BLOCK_K=block_k",
            "BLOCK_R=block_r",
            "INDEX_64=math.prod(full_shape) + block_k * block_r > 2**31 - 1",
            "PHASE=phase",
        ]
    call = template.fill(
        _CALL, kernel=kernel_name, args=", ".join(args), launch=[f"{item}," for item in launch], upper=upper
    )
    launches = call if red is None else f"{_ROW_PHASES}\n{textwrap.indent(call, '    ')}"
    return template.fill(
        _LAUNCHER,
        name=name,
        signature=signature,
        describe=group.describe(),
        full_shapes=", ".join(a + ".shape" for a in full),
        row_layout=_row_layout(group, red) if red is not None else "",
        out_shape="full_shape" if group.out_space is Space.FULL else "row_shape",
        first=full[0],
        dtype=group.out_dtype,
        operands=[line for leaf in leaves for line in _leaf_lines(leaf)],
        grid=grid,
        launches=launches,
    )


def _row_layout(group: Group, red: Reduction) -> str:
    """The rows of the reduction and the shape of a row-valued result."""
    return template.fill(
        _ROW_LAYOUT,
        rank=len(group.full_shape),
        dims=repr(red.dims),
        middle=red.middle_reduced,
        groups=next((s.arg for s in group.scalars if s.key == GROUP_COUNT), str(red.groups)),
        keepdim=red.keepdim and not red.per_element,
    )


def _leaf_lines(leaf: Leaf) -> list[str]:
    """Contiguous (expanded first when it broadcasts in several blocks), then the broadcast layout against the
    space the leaf is read in, or a shape check."""
    space = "full_shape" if leaf.space is Space.FULL else "row_shape"
    if leaf.expand:
        lines = [f"{leaf.arg} = {leaf.arg}.expand({space}).contiguous()"]
    else:
        lines = [f"{leaf.arg} = {leaf.arg}.contiguous()"]
    if leaf.two_blocks:
        lines.append(f"{', '.join(layout_args(leaf))} = broadcast_blocks({leaf.arg}.shape, {space})")
    elif leaf.broadcast:
        lines.append(f"{leaf.arg}_inner, {leaf.arg}_size = broadcast_layout({leaf.arg}.shape, {space})")
    else:
        lines.append(template.fill(_SHAPE_CHECK, arg=leaf.arg, space=space))
    return lines
