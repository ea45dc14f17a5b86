"""The two kernel templates of a composed group, filled with the sections of sections.py.

- Elementwise group (no reduction): a 1-D grid over the flat output, BLOCK elements per program.
- Group with a reduction: the input is viewed as rows (kept index `keep`) of `n_red` reduced elements. When
  the reduced dims are one adjacent block the input is [outer, n_red, inner] and row `keep` = (outer, inner)
  starts at (keep // inner) * n_red * inner + keep % inner, its elements `inner` apart; when the kept dims are
  the adjacent block (batch norm: N and H*W reduced per channel), row `keep` starts at keep * inner and
  element r lies at (r // inner) * n_keep * inner + r % inner. Each program owns BLOCK_K rows and walks their
  reduced elements in BLOCK_R tiles: one loop accumulates the statistic; a row-valued result (sum, logsumexp,
  norm) is stored per row, a per-element one (norms, softmax, x - mean) is written by a second loop that
  recomputes the ops before the reduction from the inputs instead of storing them. When there are too few
  rows to fill the GPU (a whole-tensor norm is one row), each row is split into slices over several programs,
  in two launches: partial statistics per slice, then their merge and the output (stats.py).
"""

from __future__ import annotations

from htam_graph.rules.codegen import template
from htam_graph.rules.codegen.fused_elementwise import operand_renderer
from htam_graph.rules.compose.cross_entropy import target_load
from htam_graph.rules.compose.group import DTYPE_EPS, Group, Space, layout_args
from htam_graph.rules.compose.reducers import Reduction
from htam_graph.rules.compose.sections import SectionWriter
from htam_graph.rules.compose.stats import (
    PARTIALS,
    accumulate_lines,
    finalize_lines,
    init_lines,
    merged_finalize_lines,
    partial_store_lines,
)
from htam_graph.rules.ops import Const

__all__ = ["kernel_source"]

# Elementwise group: BLOCK consecutive elements of the flat output per program.
_FLAT = '''\
@triton.jit
def $name(
    $params
    BLOCK: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """Fused $describe: BLOCK consecutive output elements per program, in fp32."""
    pid = tl.program_id(0)
    if INDEX_64:  # more than 2**31 elements: 64-bit offsets
        pid = pid.to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    $body
    tl.store(out_ptr + offs, $result.to(out_ptr.dtype.element_ty), mask=mask)
'''

# Group with a reduction: BLOCK_K rows per program, over one of the `n_split` slices [r_start, r_end) of each
# row's reduced range. PHASE 2 (n_split = 1): each program reads its rows whole. PHASE 0 and 1 split few long
# rows across programs: phase 0 stores each slice's partial statistics, phase 1 merges every slice's and
# writes its slice of the output (a row result: the first slice's programs store it). Moments are taken about
# each row's first value (the shift), the same in every slice.
_ROWS = '''\
@triton.jit
def $name(
    $params
    BLOCK_K: tl.constexpr,
    BLOCK_R: tl.constexpr,
    INDEX_64: tl.constexpr,
    PHASE: tl.constexpr,
):
    """Fused $describe: BLOCK_K rows per program (or one slice of them), statistics in fp32."""
    pid = tl.program_id(0)
    split = pid % n_split
    keep = (pid // n_split) * BLOCK_K + tl.arange(0, BLOCK_K)
    if INDEX_64:  # more than 2**31 elements: 64-bit offsets
        keep = keep.to(tl.int64)
    keep_mask = keep < n_keep
    keep_base = $keep_base
    r_start = split * red_per_split
    r_end = tl.minimum(r_start + red_per_split, n_red)
    $shift
    if PHASE != 1:  # this program's slice of its rows
        $init
        $accumulate
    if PHASE == 0:
        $partials
    else:
        if PHASE == 1:
            $merged
        else:
            $finalize
        $row_values
        $write
'''

_SHIFT = """\
offs0 = keep_base[None, :]
mask0 = keep_mask[None, :]
$first
shift = tl.where(mask0, $value, 0.0)
"""

# One pass over the rows' reduced elements, BLOCK_R at a time (loop 1: suffix "", loop 2: suffix "2").
_TILES = """\
for start$k in range(r_start, r_end, BLOCK_R):
    red$k = start$k + tl.arange(0, BLOCK_R)
    if INDEX_64:
        red$k = red$k.to(tl.int64)
    offs$k = keep_base[None, :] + ($red_offset)[:, None]
    mask$k = keep_mask[None, :] & (red$k < r_end)[:, None]
    $body
"""

_KEEP_BASE = {True: "(keep // inner) * (n_red * inner) + keep % inner", False: "keep * inner"}
_STORE = "tl.store(out_ptr + {offs}, {value}.to(out_ptr.dtype.element_ty), mask={mask})"


def kernel_source(group: Group, name: str) -> tuple[str, set[str]]:
    """The @triton.jit kernel of `group` and the helper names it calls."""
    writer = SectionWriter(group)
    if group.reduction is None:
        body, names = writer.full([group.output], "", "offs", "mask")
        text = template.fill(
            _FLAT,
            name=name,
            params=_params(group, ["out_ptr", "n_elements"]),
            describe=group.describe(),
            body=body,
            result=names[group.output],
        )
        return text, writer.helpers
    return _row_kernel(group, group.reduction, name, writer), writer.helpers


def _row_kernel(group: Group, red: Reduction, name: str, writer: SectionWriter) -> str:
    source = red.node.operands[0].name  # type: ignore[union-attr]
    middle = red.middle_reduced
    shift = ""
    if red.needs_shift:  # each row's first value: the moments are sums of deviations from it
        first, shift_names = writer.full([source], "_0", "offs0", "mask0")
        shift = template.fill(_SHIFT, first=first, value=shift_names[source])
    target = next((leaf for leaf in group.leaves if leaf.index), None)  # cross-entropy's class indices
    row_target = []  # one target per row, read before the loop
    if target is not None and target.space is Space.REDUCED:
        row_target = [target_load(target.arg, red.ignore_index, "keep", "keep_mask")]
    loop_body, loop_names = writer.full([source], "_1", "offs", "mask")
    if target is not None and target.space is Space.FULL:  # one target per element of the tile
        loop_body.append(target_load(target.arg, red.ignore_index, "offs", "mask"))
    accumulate = template.fill(
        _TILES,
        k="",
        red_offset=_red_offset(middle, ""),
        body=loop_body + accumulate_lines(red, loop_names[source]),
    )
    eps = _eps(group, red)
    splits = red.target is None  # cross-entropy's per-row target statistics are not merged across slices
    row_values = writer.reduced()
    return template.fill(
        _ROWS,
        name=name,
        params=_params(group, ["out_ptr", "n_keep", "n_red", "inner", "n_split", "red_per_split"])
        + [f"part_{p}_ptr," for p, _ in PARTIALS[red.family]],
        describe=group.describe(),
        keep_base=_KEEP_BASE[middle],
        shift=shift,
        init=[*row_target, *init_lines(red)],
        accumulate=accumulate,
        partials=partial_store_lines(red) if splits else ["pass  # never split"],
        merged=merged_finalize_lines(red, eps) if splits else ["pass  # never split"],
        finalize=finalize_lines(red, eps),
        row_values=row_values,
        write=_write(group, middle, writer),
    )


def _red_offset(middle: bool, k: str) -> str:
    """Where reduced element red<k> of a row lies from the row's start (see the module docstring)."""
    return f"red{k} * inner" if middle else f"(red{k} // inner) * (n_keep * inner) + red{k} % inner"


def _write(group: Group, middle: bool, writer: SectionWriter) -> str:
    """A row result stored per row, or loop 2 writing every element."""
    if group.out_space is Space.REDUCED:  # one value per row, stored by its first slice's program
        mask = "keep_mask & (split == 0)"
        return _STORE.format(offs="keep", value=writer.row_vars[group.output], mask=mask)
    out_body, out_names = writer.full([group.output], "_2", "offs2", "mask2")
    store = _STORE.format(offs="offs2", value=out_names[group.output], mask="mask2")
    return template.fill(_TILES, k="2", red_offset=_red_offset(middle, "2"), body=[*out_body, store])


def _eps(group: Group, red: Reduction) -> str | None:
    """How the kernel reads a norm's epsilon: a literal, or the scalar argument it is passed as."""
    if red.eps is None:
        return None
    scalars = {s.key: s.arg for s in group.scalars}
    if red.eps == Const(None):  # RMS norm without eps: the input dtype's epsilon, passed by the launcher
        return scalars[DTYPE_EPS]
    return operand_renderer({}, scalars)(red.eps)


def _params(group: Group, middle: list[str]) -> list[str]:
    """The kernel's parameters: leaf pointers, `middle`, broadcast layouts, scalars (one per line)."""
    params = [f"{leaf.arg}_ptr" for leaf in group.leaves] + middle
    params += [layout for leaf in group.leaves for layout in layout_args(leaf)]
    params += [s.arg for s in group.scalars if s.in_kernel]
    return [f"{p}," for p in params]
