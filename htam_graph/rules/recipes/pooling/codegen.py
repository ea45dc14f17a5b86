"""Source text of the windowed pooling kernel and the Python helpers its launcher (launch.py) calls.

One kernel serves max and avg pooling over 1, 2 or 3 spatial dimensions: the input is viewed as
(planes, D, H, W) with the missing leading spatial dimensions of size 1 (planes = batch * channels), the
output as rows (plane, od, oh) of OW outputs. The grid is 2D: axis 0 over groups of ROWS output rows (each row
index is split into plane / od / oh once per program, never per element), axis 1 over blocks of BLOCK_W
consecutive outputs along W (BLOCK_W * ROWS = BLOCK; ROWS > 1 only when a row is shorter than BLOCK). Per
element only the W position is computed, in 32 bits from a per-row base. Window extents, strides, paddings and
dilations are `tl.constexpr` (read from the pooling module at run time, so Triton specialises the window
loop); every program loops over the window with `tl.static_range`, skipping a whole D/H row of the window that
lies in the padding with one per-row test. The elementwise ops before the pool (its prologue) are evaluated on
every window element as it is loaded, the ops after it (its epilogue) on the pooled value, all in fp32
registers: the pooled tensor's input and every intermediate never go through memory. Max pooling propagates
NaN, as PyTorch does."""

from __future__ import annotations

from dataclasses import dataclass

from htam_graph.rules.codegen import template
from htam_graph.rules.codegen.fused_elementwise import Leaf, Region, Scalar, operand_renderer
from htam_graph.rules.codegen.triton_math import emit_op

__all__ = ["PoolCode", "POOL_HELPERS_SOURCE", "pool_kernel_source"]

# Emitted into every pooling file: window parameters of the module, and the output size, as PyTorch defines
# it.
POOL_HELPERS_SOURCE = '''def as_window(value: object, nd: int) -> tuple[int, ...]:
    """A pooling parameter (int or tuple, as nn.*Pool stores it) as one int per spatial dimension."""
    values = tuple(value) if isinstance(value, tuple | list) else (value,) * nd
    if len(values) == 1:
        values = values * nd
    if len(values) != nd:
        raise ValueError(f"pooling parameter {value!r} does not have {nd} entries")
    return tuple(int(v) for v in values)


def pool_output_size(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool) -> int:
    """Output length of one pooled dimension (PyTorch's pooling_output_shape, floor or ceil mode)."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1 + (stride - 1 if ceil_mode else 0)
    out = span // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1  # the last window must start inside the input or its left padding
    return out
'''


@dataclass(frozen=True)
class PoolCode:
    """What the pooling kernel computes: the op, its rank, its prologue and epilogue regions."""

    op: str  # max_pool2d, avg_pool3d...
    nd: int  # pooled spatial dimensions
    source: Leaf  # the tensor the pool (or its prologue) reads at window positions
    pre: Region | None  # elementwise prologue (None: the pool reads `source` directly)
    post: Region | None  # elementwise epilogue reading the pooled value (None: store it)
    pooled_ref: str  # graph name of the pool node (the epilogue's leaf that is the pooled value)
    scalars: tuple[Scalar, ...]  # module-attribute scalars of both regions, deduplicated by path

    @property
    def is_max(self) -> bool:
        return self.op.startswith("max_pool")

    def pre_leaves(self) -> tuple[Leaf, ...]:
        return self.pre.leaves if self.pre is not None else (self.source,)

    def post_leaves(self) -> tuple[Leaf, ...]:
        if self.post is None:
            return ()
        return tuple(leaf for leaf in self.post.leaves if leaf.ref != self.pooled_ref)

    def tensor_leaves(self) -> tuple[Leaf, ...]:
        return (*self.pre_leaves(), *self.post_leaves())


def _region_lines(
    region: Region, vars_: dict[str, str], scalars: dict[str, str], tag: str
) -> tuple[list[str], set[str], str]:
    """Lines evaluating a region's ops (its leaves already loaded into `vars_`), helpers used, result var."""
    render = operand_renderer(vars_, scalars)
    lines: list[str] = []
    helpers: set[str] = set()
    for i, node in enumerate(region.nodes):
        emitted = emit_op(node, render)
        helpers |= emitted.helpers
        var = f"{tag}{i}"
        vars_[node.name] = var
        lines.append(f"{var} = {emitted.expr}  # {node.op} ({node.origin})")
    return lines, helpers, vars_[region.output]


def _load_text(leaf: Leaf, at: str, mask: str, other: str, var: str, base: str = "_ptr") -> str:
    return f"{var} = tl.load({leaf.arg}{base} + {at}, mask={mask}, other={other}).to(tl.float32)"


def _row_load(leaf: Leaf, base: str, mask: str, var: str) -> str:
    """A broadcast leaf constant along W (`<arg>_PER_ROW`): one value per output / input row."""
    at = f"({base} // {leaf.arg}_inner) % {leaf.arg}_size"
    return template.fill(_ROW_LOAD, arg=leaf.arg, load=_load_text(leaf, at, mask, "0.0", var))


_ROW_LOAD = """\
if ${arg}_PER_ROW:  # constant along W: one value per row, no per-element division
    $load
"""


def _kernel_params(code: PoolCode) -> list[str]:
    leaves = code.tensor_leaves()
    params = [f"{leaf.arg}_ptr" for leaf in leaves] + ["out_ptr"]
    params += ["n_rows", "ID, IH, IW", "OD, OH, OW", "w_block_first"]
    params += [f"{leaf.arg}_inner, {leaf.arg}_size" for leaf in leaves if leaf.broadcast]
    params += [s.arg for s in code.scalars]
    params += ["KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr"]
    params += ["SD: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr"]
    params += ["PD: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr"]
    if code.is_max:
        params += ["DD: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr"]
    else:
        params += ["COUNT_INCLUDE_PAD: tl.constexpr", "DIVISOR_OVERRIDE: tl.constexpr"]
    params += [f"{leaf.arg}_PER_ROW: tl.constexpr" for leaf in leaves if leaf.broadcast]
    params += ["ROWS: tl.constexpr", "BLOCK_W: tl.constexpr", "INDEX_64: tl.constexpr"]
    return params


# The kernel: a tile of output rows, the window loop over D, H (one row test) and W (a constexpr offset per
# tap), the prologue on each loaded element, the fold, then the epilogue on the pooled value and one store.
_KERNEL = '''\
@triton.jit
def $kernel_name(
    $params
):
    """$Kind pooling over a KD x KH x KW window, in fp32: one program computes a tile of
    ROWS output rows x BLOCK_W consecutive outputs along W.

    The input is viewed as (planes, ID, IH, IW) with planes = batch * channels (1D and 2D pools have
    ID = 1 and/or IH = 1), the output as n_rows = planes * OD * OH rows of OW. Each row index is split
    into (plane, od, oh) once per program; per element only the position along W is computed. Window
    positions outside the input are padding: a whole D/H row of the window is skipped by one row test."""
    pid_row = tl.program_id(0)  # the large count (rows) is on grid axis 0
    if INDEX_64:  # more than 2**31 elements: 64-bit row bases (in-row offsets stay 32-bit)
        pid_row = pid_row.to(tl.int64)
    row = pid_row * ROWS + tl.arange(0, ROWS)[:, None]  # [ROWS, 1]
    row_ok = row < n_rows
    oh = row % OH
    rest = row // OH
    od = rest % OD
    plane = rest // OD
    ow = (w_block_first + tl.program_id(1)) * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]  # [1, BLOCK_W]
    out_ok = row_ok & (ow < OW)
    # first input position of each window (may lie in the padding)
    d0 = od * SD - PD
    h0 = oh * SH - PH
    w0 = ow * SW - PW
    $acc
    for kd in tl.static_range(KD):
        di = d0 + $step_d
        for kh in tl.static_range(KH):
            hi = h0 + $step_h
            # one test per input row: a window row in the D/H padding loads nothing
            row_in = row_ok & (di >= 0) & (di < ID) & (hi >= 0) & (hi < IH)
            in_row = ((plane * ID + di) * IH + hi) * IW  # flat index of input (plane, di, hi, 0)
            $row_loads
            for kw in tl.static_range(KW):
                # input position w0 + $step_w inside [0, IW), tested on w0 so that the tap's offset
                # stays a compile-time constant added to the row pointers
                valid = row_in & (w0 >= -$step_w) & (w0 < IW - $step_w)
                $tap
    $pooled
    out_row = row * OW  # flat index of output (plane, od, oh, 0)
    $epilogue
    tl.store(out_ptr + out_row + ow, $result.to(out_ptr.dtype.element_ty), mask=out_ok)
'''

_MAX_ACC = 'acc = tl.full([ROWS, BLOCK_W], -float("inf"), tl.float32)  # padding never wins a max'
_AVG_ACC = "acc = tl.zeros([ROWS, BLOCK_W], tl.float32)  # fp32 window sum"

# avg pooling's divisor, as PyTorch computes it.
_AVG_DIVISOR = """\
if DIVISOR_OVERRIDE > 0:
    pooled = acc / DIVISOR_OVERRIDE
else:
    # PyTorch's divisor: the window clipped to the padded input (count_include_pad) or to the
    # input; its D and H factors are per row, only the W factor is per element
    d1 = tl.minimum(d0 + KD, ID + PD)
    h1 = tl.minimum(h0 + KH, IH + PH)
    w1 = tl.minimum(w0 + KW, IW + PW)
    if COUNT_INCLUDE_PAD:
        count = ((d1 - d0) * (h1 - h0)) * (w1 - w0)
    else:
        count = (tl.minimum(d1, ID) - tl.maximum(d0, 0)) * (tl.minimum(h1, IH) - tl.maximum(h0, 0))
        count = count * (tl.minimum(w1, IW) - tl.maximum(w0, 0))
    count = tl.where(out_ok, count, 1)  # lanes past the row's end (never stored) must not divide by 0
    pooled = acc / count.to(tl.float32)
"""


def pool_kernel_source(code: PoolCode, kernel_name: str) -> tuple[str, frozenset[str]]:
    """The @triton.jit kernel text and the triton_math helpers it calls."""
    scalar_args = {s.path: s.arg for s in code.scalars}
    step = ("kd * DD", "kh * DH", "kw * DW") if code.is_max else ("kd", "kh", "kw")
    vars_ = {leaf.ref: f"a{i}" for i, leaf in enumerate(code.pre_leaves())}
    tap, helpers = _tap(code, step[2], vars_, scalar_args)
    epilogue, result = _epilogue(code, scalar_args, helpers)
    text = template.fill(
        _KERNEL,
        kernel_name=kernel_name,
        params=[f"{p}," for p in _kernel_params(code)],
        Kind="Max" if code.is_max else "Average",
        acc=_MAX_ACC if code.is_max else _AVG_ACC,
        step_d=step[0],
        step_h=step[1],
        step_w=step[2],
        row_loads=[_row_start(leaf, f"a{i}") for i, leaf in enumerate(code.pre_leaves())],
        tap=tap,
        pooled="pooled = acc" if code.is_max else _AVG_DIVISOR,
        epilogue=epilogue,
        result=result,
    )
    return text, frozenset(helpers)


def _row_start(leaf: Leaf, var: str) -> str:
    """Per input row of the window: a broadcast leaf's per-row value, or a full leaf's row pointer."""
    if leaf.broadcast:
        return _row_load(leaf, "in_row", "row_in", var)
    return (
        f"{leaf.arg}_win = {leaf.arg}_ptr + in_row + w0  # window starts in this input row (64-bit pointers)"
    )


def _tap(
    code: PoolCode, step_w: str, vars_: dict[str, str], scalar_args: dict[str, str]
) -> tuple[list[str], set[str]]:
    """One window tap: its loads, the prologue on them and the fold into `acc`; the helpers the prologue
    calls."""
    neutral = '-float("inf")' if code.is_max else "0.0"
    # Without a prologue a masked load can return the reduction's identity directly.
    identity = neutral if code.pre is None else "0.0"
    lines: list[str] = []
    for i, leaf in enumerate(code.pre_leaves()):
        if leaf.broadcast:
            at = f"((in_row + w0 + {step_w}) // {leaf.arg}_inner) % {leaf.arg}_size"
            lines += [f"if not {leaf.arg}_PER_ROW:", f"    {_load_text(leaf, at, 'valid', '0.0', f'a{i}')}"]
        else:
            lines.append(_load_text(leaf, step_w, "valid", identity, f"a{i}", "_win"))
    helpers: set[str] = set()
    if code.pre is not None:
        lines.append("# prologue, on every window element as it is loaded")
        pre_lines, helpers, value = _region_lines(code.pre, vars_, scalar_args, "p")
        lines += pre_lines
        masked = f"tl.where(valid, {value}, {neutral})"
    else:
        masked = vars_[code.source.ref]
    if code.is_max:
        lines.append(f"acc = tl.maximum(acc, {masked}, propagate_nan=tl.PropagateNan.ALL)  # NaN wins")
    else:
        lines.append(f"acc += {masked}")
    return lines, helpers


def _epilogue(code: PoolCode, scalar_args: dict[str, str], helpers: set[str]) -> tuple[list[str], str]:
    """The epilogue's operand loads and ops on the pooled value (adding the helpers they call); the result."""
    if code.post is None:
        return [], "pooled"
    post_vars: dict[str, str] = {code.pooled_ref: "pooled"}
    lines = ["# epilogue, on the pooled value"]
    for i, leaf in enumerate(code.post_leaves()):
        post_vars[leaf.ref] = f"b{i}"
        if leaf.broadcast:
            at = f"((out_row + ow) // {leaf.arg}_inner) % {leaf.arg}_size"
            lines += [_row_load(leaf, "out_row", "row_ok", f"b{i}")]
            lines += ["else:", f"    {_load_text(leaf, at, 'out_ok', '0.0', f'b{i}')}"]
        else:
            lines.append(_load_text(leaf, "out_row + ow", "out_ok", "0.0", f"b{i}"))
    post_lines, post_helpers, result = _region_lines(code.post, post_vars, scalar_args, "q")
    helpers |= post_helpers
    return lines + post_lines, result
