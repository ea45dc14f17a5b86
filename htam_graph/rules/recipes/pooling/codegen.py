"""Source text of the windowed pooling kernel, its launcher and the Python helpers they share.

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

from htam_graph.rules.base import KernelConfig
from htam_graph.rules.codegen import template
from htam_graph.rules.codegen.fused_elementwise import Leaf, Region, Scalar, operand_renderer
from htam_graph.rules.codegen.triton_math import emit_op

__all__ = ["PoolCode", "POOL_HELPERS_SOURCE", "pool_kernel_source", "pool_launcher_source"]

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
    region: Region, vars_: dict[str, str], scalars: dict[str, str], indent: str, tag: str
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
        lines.append(f"{indent}{var} = {emitted.expr}  # {node.op} ({node.origin})")
    return lines, helpers, vars_[region.output]


def _load_text(leaf: Leaf, at: str, mask: str, other: str, var: str, base: str = "_ptr") -> str:
    return f"{var} = tl.load({leaf.arg}{base} + {at}, mask={mask}, other={other}).to(tl.float32)"


def _row_load(leaf: Leaf, base: str, mask: str, indent: str, var: str) -> list[str]:
    """A broadcast leaf constant along W (`<arg>_PER_ROW`): one value per output / input row."""
    at = f"({base} // {leaf.arg}_inner) % {leaf.arg}_size"
    return [
        f"{indent}if {leaf.arg}_PER_ROW:  # constant along W: one value per row, no per-element division",
        f"{indent}    {var} = tl.load({leaf.arg}_ptr + {at}, mask={mask}, other=0.0).to(tl.float32)",
    ]


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


_KERNEL_HEAD = '''
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
'''


def _kernel_head(code: PoolCode, kernel_name: str) -> list[str]:
    kind = "max" if code.is_max else "average"
    params = "\n".join(f"    {p}," for p in _kernel_params(code))
    return template.lines(_KERNEL_HEAD, kernel_name=kernel_name, params=params, Kind=kind.capitalize())


def pool_kernel_source(code: PoolCode, kernel_name: str) -> tuple[str, frozenset[str]]:
    """The @triton.jit kernel text and the triton_math helpers it calls."""
    scalar_args = {s.path: s.arg for s in code.scalars}
    lines = _kernel_head(code, kernel_name)
    if code.is_max:
        lines.append(
            '    acc = tl.full([ROWS, BLOCK_W], -float("inf"), tl.float32)  # padding never wins a max'
        )
        step = ("kd * DD", "kh * DH", "kw * DW")
    else:
        lines.append("    acc = tl.zeros([ROWS, BLOCK_W], tl.float32)  # fp32 window sum")
        step = ("kd", "kh", "kw")
    lines += [
        "    for kd in tl.static_range(KD):",
        f"        di = d0 + {step[0]}",
        "        for kh in tl.static_range(KH):",
        f"            hi = h0 + {step[1]}",
        "            # one test per input row: a window row in the D/H padding loads nothing",
        "            row_in = row_ok & (di >= 0) & (di < ID) & (hi >= 0) & (hi < IH)",
        "            in_row = ((plane * ID + di) * IH + hi) * IW  # flat index of input (plane, di, hi, 0)",
    ]
    body = " " * 16
    helpers: set[str] = set()
    vars_: dict[str, str] = {}
    pre_leaves = code.pre_leaves()
    for i, leaf in enumerate(pre_leaves):
        vars_[leaf.ref] = f"a{i}"
        if leaf.broadcast:
            lines += _row_load(leaf, "in_row", "row_in", " " * 12, f"a{i}")
        else:
            win = f"{leaf.arg}_win = {leaf.arg}_ptr + in_row + w0"
            lines.append(f"            {win}  # window starts in this input row (64-bit pointers)")
    lines += [
        "            for kw in tl.static_range(KW):",
        f"                # input position w0 + {step[2]} inside [0, IW), "
        "tested on w0 so that the tap's offset",
        "                # stays a compile-time constant added to the row pointers",
        f"                valid = row_in & (w0 >= -{step[2]}) & (w0 < IW - {step[2]})",
    ]
    # Without a prologue a masked load can return the reduction's identity directly.
    neutral = '-float("inf")' if code.is_max else "0.0"
    identity = neutral if code.pre is None else "0.0"
    for i, leaf in enumerate(pre_leaves):
        if leaf.broadcast:
            at = f"((in_row + w0 + {step[2]}) // {leaf.arg}_inner) % {leaf.arg}_size"
            lines.append(f"{body}if not {leaf.arg}_PER_ROW:")
            lines.append(f"{body}    {_load_text(leaf, at, 'valid', '0.0', f'a{i}')}")
        else:
            lines.append(f"{body}{_load_text(leaf, f'{step[2]}', 'valid', identity, f'a{i}', '_win')}")
    if code.pre is not None:
        lines.append(f"{body}# prologue, on every window element as it is loaded")
        pre_lines, pre_helpers, value = _region_lines(code.pre, vars_, scalar_args, body, "p")
        lines += pre_lines
        helpers |= pre_helpers
        masked = f"tl.where(valid, {value}, {neutral})"
    else:
        masked = vars_[code.source.ref]
    if code.is_max:
        lines.append(f"{body}acc = tl.maximum(acc, {masked}, propagate_nan=tl.PropagateNan.ALL)  # NaN wins")
        lines.append("    pooled = acc")
    else:
        lines.append(f"{body}acc += {masked}")
        lines += _divisor_lines()
    return _epilogue_lines(code, lines, scalar_args, helpers)


def _divisor_lines() -> list[str]:
    return [
        "    if DIVISOR_OVERRIDE > 0:",
        "        pooled = acc / DIVISOR_OVERRIDE",
        "    else:",
        "        # PyTorch's divisor: the window clipped to the padded input (count_include_pad) or to the",
        "        # input; its D and H factors are per row, only the W factor is per element",
        "        d1 = tl.minimum(d0 + KD, ID + PD)",
        "        h1 = tl.minimum(h0 + KH, IH + PH)",
        "        w1 = tl.minimum(w0 + KW, IW + PW)",
        "        if COUNT_INCLUDE_PAD:",
        "            count = ((d1 - d0) * (h1 - h0)) * (w1 - w0)",
        "        else:",
        "            count = (tl.minimum(d1, ID) - tl.maximum(d0, 0)) * (tl.minimum(h1, "
        "IH) - tl.maximum(h0, 0))",
        "            count = count * (tl.minimum(w1, IW) - tl.maximum(w0, 0))",
        "        count = tl.where(out_ok, count, 1)  # lanes past the row's end (never stored) must "
        "not divide by 0",
        "        pooled = acc / count.to(tl.float32)",
    ]


def _epilogue_lines(
    code: PoolCode, lines: list[str], scalar_args: dict[str, str], helpers: set[str]
) -> tuple[str, frozenset[str]]:
    lines.append("    out_row = row * OW  # flat index of output (plane, od, oh, 0)")
    result = "pooled"
    if code.post is not None:
        post_vars: dict[str, str] = {code.pooled_ref: "pooled"}
        lines.append("    # epilogue, on the pooled value")
        for i, leaf in enumerate(code.post_leaves()):
            post_vars[leaf.ref] = f"b{i}"
            if leaf.broadcast:
                at = f"((out_row + ow) // {leaf.arg}_inner) % {leaf.arg}_size"
                lines += _row_load(leaf, "out_row", "row_ok", "    ", f"b{i}")
                lines += ["    else:", f"        {_load_text(leaf, at, 'out_ok', '0.0', f'b{i}')}"]
            else:
                lines.append(f"    {_load_text(leaf, 'out_row + ow', 'out_ok', '0.0', f'b{i}')}")
        post_lines, post_helpers, result = _region_lines(code.post, post_vars, scalar_args, "    ", "q")
        lines += post_lines
        helpers |= post_helpers
    lines.append(f"    tl.store(out_ptr + out_row + ow, {result}.to(out_ptr.dtype.element_ty), mask=out_ok)")
    return "\n".join(lines) + "\n", frozenset(helpers)


def pool_launcher_source(code: PoolCode, launcher_name: str, kernel_name: str) -> str:
    """The Python launcher: window parameters from the module, output allocation, broadcast layouts, grid."""
    leaves = code.tensor_leaves()
    src = code.source.arg
    signature = ", ".join(
        [f"{leaf.arg}: torch.Tensor" for leaf in leaves]
        + [f"{s.arg}: float" for s in code.scalars]
        + ["pool: nn.Module"]
    )
    lines = [
        f"def {launcher_name}({signature}) -> torch.Tensor:",
        f'    """{code.op} of the prologue over `{src}`, '
        'then the epilogue; window parameters read from `pool`."""',
        f"    nd = {code.nd}  # pooled spatial dimensions",
        f"    if {src}.dim() != nd + 2:",
        f'        raise ValueError(f"expected a batched {{nd + 2}}-d input, '
        f'got shape {{tuple({src}.shape)}}")',
        "    kernel = as_window(pool.kernel_size, nd)",
        "    stride = as_window(pool.stride if pool.stride is not None else pool.kernel_size, nd)",
        "    padding = as_window(pool.padding, nd)",
        '    dilation = as_window(getattr(pool, "dilation", 1), nd)',
        "    ceil_mode = bool(pool.ceil_mode)",
        "    in_sizes = tuple(" + src + ".shape[2:])",
        "    out_sizes = tuple(",
        "        pool_output_size(n, k, s, p, d, ceil_mode)",
        "        for n, k, s, p, d in zip(in_sizes, kernel, stride, padding, dilation, strict=True)",
        "    )",
        "    pool_shape = (*" + src + ".shape[:2], *out_sizes)",
    ]
    for leaf in code.pre_leaves():
        if leaf == code.source:
            continue
        lines.append(f"    if torch.broadcast_shapes({leaf.arg}.shape, {src}.shape) != {src}.shape:")
        lines.append(f'        raise ValueError("{leaf.arg} does not broadcast to the pooled input")')
    out_shape = "pool_shape"
    if code.post is not None:
        others = ", ".join(f"{leaf.arg}.shape" for leaf in code.post_leaves())
        lines.append(f"    out_shape = torch.broadcast_shapes(pool_shape{', ' + others if others else ''})")
        lines.append("    if out_shape != pool_shape:")
        lines.append('        raise ValueError("the epilogue operands do not broadcast to the pooled shape")')
        out_shape = "out_shape"
    for leaf in leaves:
        lines.append(f"    {leaf.arg} = {leaf.arg}.contiguous()")
        if leaf.broadcast:
            target = f"{src}.shape" if leaf in code.pre_leaves() else out_shape
            lines.append(
                f"    {leaf.arg}_inner, {leaf.arg}_size = broadcast_layout({leaf.arg}.shape, {target})"
            )
    lines += [
        f"    out = torch.empty({out_shape}, device={src}.device, dtype={src}.dtype)",
        "    if out.numel() == 0:",
        "        return out",
        "    pad3 = (3 - nd) * (1,)",
        "    in3, out3, k3 = pad3 + in_sizes, pad3 + out_sizes, pad3 + kernel",
        "    s3, p3, d3 = pad3 + stride, (3 - nd) * (0,) + padding, pad3 + dilation",
        *_grid_lines(kernel_name),
    ]
    lines += _launch_lines(code, kernel_name)
    lines.append("    return out")
    return "\n".join(lines) + "\n"


def _grid_lines(kernel_name: str) -> list[str]:
    block = block_constant(kernel_name)
    return [
        "    n_rows = out.numel() // out3[2]  # output rows (plane, od, oh), each of out3[2] outputs along W",
        "    # BLOCK outputs per program: along W, and over several rows when a row is shorter than BLOCK",
        f"    block_w = min({block}, triton.next_power_of_2(out3[2]))",
        f"    rows = {block} // block_w",
        "    n_w_blocks = triton.cdiv(out3[2], block_w)",
    ]


def _launch_lines(code: PoolCode, kernel_name: str) -> list[str]:
    leaves = code.tensor_leaves()
    args = [leaf.arg for leaf in leaves] + ["out", "n_rows", "*in3", "*out3", "w_block_first"]
    args += [f"{leaf.arg}_inner, {leaf.arg}_size" for leaf in leaves if leaf.broadcast]
    args += [s.arg for s in code.scalars]
    window = [
        "KD=k3[0], KH=k3[1], KW=k3[2],",
        "SD=s3[0], SH=s3[1], SW=s3[2],",
        "PD=p3[0], PH=p3[1], PW=p3[2],",
    ]
    if code.is_max:
        window.append("DD=d3[0], DH=d3[1], DW=d3[2],")
    else:
        divisor = "int(pool.divisor_override or 0)" if code.nd > 1 else "0"
        window += ["COUNT_INCLUDE_PAD=bool(pool.count_include_pad),", f"DIVISOR_OVERRIDE={divisor},"]
    for leaf in leaves:
        if leaf.broadcast:
            along_w = "in3[2]" if leaf in code.pre_leaves() else "out3[2]"
            per_row = f"{leaf.arg}_inner % {along_w} == 0 or {leaf.arg}_size == 1"
            window.append(f"{leaf.arg}_PER_ROW={per_row},")
    return [
        "    # CUDA caps grid axis 1 at 65535 programs: very long rows are launched in slices of W blocks",
        "    for w_block_first in range(0, n_w_blocks, MAX_GRID_AXIS1):",
        "        grid = (triton.cdiv(n_rows, rows), min(MAX_GRID_AXIS1, n_w_blocks - w_block_first))",
        f"        {kernel_name}[grid](",
        f"            {', '.join(args)},",
        *(f"            {w}" for w in window),
        "            ROWS=rows,",
        "            BLOCK_W=block_w,",
        f"            INDEX_64=max(out.numel(), {code.source.arg}.numel()) "
        f"+ {block_constant(kernel_name)} > INT32_MAX,",
        f"            num_warps={warps_constant(kernel_name)},",
        "        )",
    ]


def block_constant(kernel_name: str) -> str:
    return "BLOCK_" + kernel_name.upper().removesuffix("_KERNEL")


def warps_constant(kernel_name: str) -> str:
    return "NUM_WARPS_" + kernel_name.upper().removesuffix("_KERNEL")


def pool_constants(kernel_name: str, config: KernelConfig) -> list[str]:
    """Module-level launch constants (what a tuning recipe changes)."""
    return [
        f"{block_constant(kernel_name)} = {config.block}  # pooled outputs per program",
        f"{warps_constant(kernel_name)} = {config.num_warps}",
        "MAX_GRID_AXIS1 = 65535  # CUDA's limit on grid axis 1 (blocks along W); rows go on axis 0",
        "INT32_MAX = 2**31 - 1  # beyond it, row bases are computed in 64 bits (INDEX_64)",
    ]
