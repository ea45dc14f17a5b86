"""Source text of the windowed pooling kernel, its launcher and the Python helpers they share.

One kernel serves max and avg pooling over 1, 2 or 3 spatial dimensions: the input is viewed as
(planes, D, H, W) with the missing leading spatial dimensions of size 1 (planes = batch * channels), the grid is
1D over the flattened output (`BLOCK` outputs per program), and every program loops over the window with
`tl.static_range` (the window extents are `tl.constexpr`, read from the pooling module at run time). The
elementwise ops before the pool (its prologue) are evaluated on every window element as it is loaded, the ops
after it (its epilogue) on the pooled value, all in fp32 registers: the pooled tensor's input and every
intermediate never go through memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from htam_graph.rules.base import KernelConfig, NotApplicable
from htam_graph.rules.fused_elementwise import Leaf, Region, Scalar
from htam_graph.rules.ops import AttrScalar, Const, Ref, Value
from htam_graph.rules.triton_math import emit_op, render_literal

__all__ = ["PoolCode", "POOL_HELPERS_SOURCE", "pool_kernel_source", "pool_launcher_source"]

# Emitted into every pooling file: window parameters of the module, and the output size, as PyTorch defines it.
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


def _renderer(vars_: dict[str, str], scalars: dict[str, str]):  # type: ignore[no-untyped-def]
    def render(value: Value) -> str:
        if isinstance(value, Ref):
            return vars_[value.name]
        if isinstance(value, AttrScalar):
            return scalars[value.path]
        if (
            isinstance(value, Const)
            and isinstance(value.value, int | float)
            and not isinstance(value.value, bool)
        ):
            return render_literal(value.value)
        raise NotApplicable(f"unsupported operand {value}")

    return render


def _region_lines(
    region: Region, vars_: dict[str, str], scalars: dict[str, str], indent: str, tag: str
) -> tuple[list[str], set[str], str]:
    """Lines evaluating a region's ops (its leaves already loaded into `vars_`), helpers used, result var."""
    render = _renderer(vars_, scalars)
    lines: list[str] = []
    helpers: set[str] = set()
    for i, node in enumerate(region.nodes):
        emitted = emit_op(node, render)
        helpers |= emitted.helpers
        var = f"{tag}{i}"
        vars_[node.name] = var
        lines.append(f"{indent}{var} = {emitted.expr}  # {node.op} ({node.origin})")
    return lines, helpers, vars_[region.output]


def _load(leaf: Leaf, index: str, mask: str, indent: str, var: str) -> str:
    at = f"({index} // {leaf.arg}_inner) % {leaf.arg}_size" if leaf.broadcast else index
    return f"{indent}{var} = tl.load({leaf.arg}_ptr + {at}, mask={mask}, other=0.0).to(tl.float32)"


def pool_kernel_source(code: PoolCode, kernel_name: str) -> tuple[str, frozenset[str]]:
    """The @triton.jit kernel text and the triton_math helpers it calls."""
    leaves = code.tensor_leaves()
    scalar_args = {s.path: s.arg for s in code.scalars}
    params = [f"{leaf.arg}_ptr" for leaf in leaves] + ["out_ptr", "n_out"]
    params += ["ID, IH, IW", "OD, OH, OW", "SD, SH, SW", "PD, PH, PW"]
    params += ["DD, DH, DW"] if code.is_max else ["DIVISOR_OVERRIDE"]
    params += [f"{leaf.arg}_inner, {leaf.arg}_size" for leaf in leaves if leaf.broadcast]
    params += [s.arg for s in code.scalars]
    params += ["KD: tl.constexpr", "KH: tl.constexpr", "KW: tl.constexpr"]
    if not code.is_max:
        params += ["COUNT_INCLUDE_PAD: tl.constexpr"]
    params += ["BLOCK: tl.constexpr", "INDEX_64: tl.constexpr"]
    kind = "max" if code.is_max else "average"
    lines = [
        "@triton.jit",
        f"def {kernel_name}(",
        *(f"    {p}," for p in params),
        "):",
        f'    """{kind.capitalize()} pooling over a KD x KH x KW window: one program computes BLOCK outputs in fp32.',
        "",
        "    The input is viewed as (planes, ID, IH, IW) with planes = batch * channels (1D and 2D pools have",
        '    ID = 1 and/or IH = 1); window positions outside the input are padding and are skipped."""',
        "    pid = tl.program_id(0)",
        "    if INDEX_64:  # more than 2**31 elements: 64-bit offsets",
        "        pid = pid.to(tl.int64)",
        "    offs = pid * BLOCK + tl.arange(0, BLOCK)",
        "    mask = offs < n_out",
        "    # (plane, od, oh, ow) of every output element of this program",
        "    ow = offs % OW",
        "    rest = offs // OW",
        "    oh = rest % OH",
        "    rest = rest // OH",
        "    od = rest % OD",
        "    plane = rest // OD",
        "    # first input position of each window (may lie in the padding)",
        "    d0 = od * SD - PD",
        "    h0 = oh * SH - PH",
        "    w0 = ow * SW - PW",
    ]
    if code.is_max:
        lines.append('    acc = tl.full([BLOCK], -float("inf"), tl.float32)  # padding never wins a max')
        step = ("DD", "DH", "DW")
    else:
        lines.append("    acc = tl.zeros([BLOCK], tl.float32)  # fp32 window sum")
        step = ("1", "1", "1")
    lines += [
        "    for kd in tl.static_range(KD):",
        f"        di = d0 + kd * {step[0]}",
        "        d_in = (di >= 0) & (di < ID)",
        "        for kh in tl.static_range(KH):",
        f"            hi = h0 + kh * {step[1]}",
        "            dh_in = d_in & (hi >= 0) & (hi < IH)",
        "            for kw in tl.static_range(KW):",
        f"                wi = w0 + kw * {step[2]}",
        "                valid = mask & dh_in & (wi >= 0) & (wi < IW)",
        "                src = ((plane * ID + di) * IH + hi) * IW + wi  # flat index of the window element",
    ]
    body = " " * 16
    helpers: set[str] = set()
    vars_: dict[str, str] = {}
    for i, leaf in enumerate(code.pre_leaves()):
        vars_[leaf.ref] = f"a{i}"
        lines.append(_load(leaf, "src", "valid", body, f"a{i}"))
    if code.pre is not None:
        lines.append(f"{body}# prologue, on every window element as it is loaded")
        pre_lines, pre_helpers, value = _region_lines(code.pre, vars_, scalar_args, body, "p")
        lines += pre_lines
        helpers |= pre_helpers
    else:
        value = vars_[code.source.ref]
    if code.is_max:
        lines.append(f'{body}acc = tl.maximum(acc, tl.where(valid, {value}, -float("inf")))')
        lines.append("    pooled = acc")
    else:
        lines.append(f"{body}acc += tl.where(valid, {value}, 0.0)")
        lines += [
            "    # PyTorch's divisor: the window clipped to the padded input (count_include_pad) or to the input",
            "    d1 = tl.minimum(d0 + KD, ID + PD)",
            "    h1 = tl.minimum(h0 + KH, IH + PH)",
            "    w1 = tl.minimum(w0 + KW, IW + PW)",
            "    if COUNT_INCLUDE_PAD:",
            "        count = (d1 - d0) * (h1 - h0) * (w1 - w0)",
            "    else:",
            "        count = (tl.minimum(d1, ID) - tl.maximum(d0, 0)) * (tl.minimum(h1, IH) - tl.maximum(h0, 0))",
            "        count = count * (tl.minimum(w1, IW) - tl.maximum(w0, 0))",
            "    count = tl.where(DIVISOR_OVERRIDE > 0, DIVISOR_OVERRIDE, count)",
            "    pooled = acc / count.to(tl.float32)",
        ]
    result = "pooled"
    if code.post is not None:
        post_vars: dict[str, str] = {code.pooled_ref: "pooled"}
        lines.append("    # epilogue, on the pooled value")
        for i, leaf in enumerate(code.post_leaves()):
            post_vars[leaf.ref] = f"b{i}"
            lines.append(_load(leaf, "offs", "mask", "    ", f"b{i}"))
        post_lines, post_helpers, result = _region_lines(code.post, post_vars, scalar_args, "    ", "q")
        lines += post_lines
        helpers |= post_helpers
    lines.append(f"    tl.store(out_ptr + offs, {result}.to(out_ptr.dtype.element_ty), mask=mask)")
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
    block, warps = block_constant(kernel_name), warps_constant(kernel_name)
    lines = [
        f"def {launcher_name}({signature}) -> torch.Tensor:",
        f'    """{code.op} of the prologue over `{src}`, then the epilogue; window parameters read from `pool`."""',
        f"    nd = {code.nd}  # pooled spatial dimensions",
        f"    if {src}.dim() != nd + 2:",
        f'        raise ValueError(f"expected a batched {{nd + 2}}-d input, got shape {{tuple({src}.shape)}}")',
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
        "    n_out = out.numel()",
        "    if n_out == 0:",
        "        return out",
        "    pad3 = (3 - nd) * (1,)",
        "    in3, out3, k3 = pad3 + in_sizes, pad3 + out_sizes, pad3 + kernel",
        "    s3, p3, d3 = pad3 + stride, (3 - nd) * (0,) + padding, pad3 + dilation",
        f"    grid = (triton.cdiv(n_out, {block}),)",
    ]
    args = [leaf.arg for leaf in leaves] + ["out", "n_out", "*in3", "*out3", "*s3", "*p3"]
    if code.is_max:
        args.append("*d3")
    else:
        args.append("int(pool.divisor_override or 0)" if code.nd > 1 else "0")
    args += [f"{leaf.arg}_inner, {leaf.arg}_size" for leaf in leaves if leaf.broadcast]
    args += [s.arg for s in code.scalars]
    count_pad = [] if code.is_max else ["        COUNT_INCLUDE_PAD=bool(pool.count_include_pad),"]
    n_src = f"{src}.numel()"
    lines += [
        f"    {kernel_name}[grid](",
        f"        {', '.join(args)},",
        "        KD=k3[0],",
        "        KH=k3[1],",
        "        KW=k3[2],",
        *count_pad,
        f"        BLOCK={block},",
        f"        INDEX_64=max(n_out, {n_src}) + {block} > 2**31 - 1,",
        f"        num_warps={warps},",
        "    )",
        "    return out",
    ]
    return "\n".join(lines) + "\n"


def block_constant(kernel_name: str) -> str:
    return "BLOCK_" + kernel_name.upper().removesuffix("_KERNEL")


def warps_constant(kernel_name: str) -> str:
    return "NUM_WARPS_" + kernel_name.upper().removesuffix("_KERNEL")


def pool_constants(kernel_name: str, config: KernelConfig) -> list[str]:
    """Module-level launch constants (what a tuning recipe changes)."""
    return [
        f"{block_constant(kernel_name)} = {config.block}  # pooled outputs per program",
        f"{warps_constant(kernel_name)} = {config.num_warps}",
    ]
