"""Source text of the direct depthwise convolution kernel (1D / 2D), its launcher and the Python helpers.

The input is viewed as (N, C_in, H, W) planes (a 1D conv is H = 1). Grid axis 0 enumerates (n, c_out, block of
BLOCK_H output rows), decomposed ONCE per program into scalars; axis 1 enumerates blocks of BLOCK_W
consecutive output columns. A program accumulates its [BLOCK_H, BLOCK_W] tile in fp32 over the KH x KW taps
(kernel size, stride, padding and dilation are `tl.constexpr`, so the tap loops are unrolled and every index
offset is a compile-time constant), loads each of its channel's weights once as a scalar, masks the padded
borders, then adds the bias and applies the elementwise epilogue in registers and stores the tile once. Plane
bases are 64-bit scalars; offsets inside a plane are 32-bit (the launcher checks they fit). No per-element
division."""

from __future__ import annotations

from dataclasses import dataclass

from htam_graph.rules.base import KernelConfig
from htam_graph.rules.codegen import template
from htam_graph.rules.codegen.conv_epilogue import tile_constants
from htam_graph.rules.codegen.fused_elementwise import Leaf, Region, Scalar, kernel_stem, operand_renderer
from htam_graph.rules.codegen.triton_math import emit_op

__all__ = [
    "DepthwiseCode",
    "CONV_GEOMETRY_SOURCE",
    "depthwise_constants",
    "depthwise_kernel_source",
    "depthwise_launcher_source",
]

BLOCK_W_MAX = 128  # output columns per tile at most: 512 contiguous bytes of fp32 per row of the tile

# Emitted into every file: the conv parameters as nn.Conv*d stores them, and PyTorch's output-size rule.
CONV_GEOMETRY_SOURCE = '''def conv_tuple(value: object, nd: int) -> tuple[int, ...]:
    """A conv parameter (int or tuple, as nn.Conv*d / F.conv*d take it) as one int per spatial dimension."""
    values = tuple(value) if isinstance(value, tuple | list) else (value,) * nd
    if len(values) == 1:
        values = values * nd
    if len(values) != nd:
        raise ValueError(f"conv parameter {value!r} does not have {nd} entries")
    return tuple(int(v) for v in values)


def conv_geometry(
    padding: object, in_sizes: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...],
    dilation: tuple[int, ...],
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(leading pad, output size) per spatial dim, as PyTorch's convolution defines them.

    padding="same" pads dilation * (kernel - 1) in total, the odd element on the trailing side (PyTorch's
    convention), so the output has the input's size; "valid" is no padding.
    """
    nd = len(in_sizes)
    if padding == "same":
        if any(s != 1 for s in stride):
            raise ValueError("padding='same' is not supported for strided convolutions")
        return tuple(d * (k - 1) // 2 for k, d in zip(kernel, dilation)), tuple(in_sizes)
    pads = (0,) * nd if padding == "valid" else conv_tuple(padding, nd)
    outs = tuple(
        (i + 2 * p - d * (k - 1) - 1) // s + 1
        for i, p, k, s, d in zip(in_sizes, pads, kernel, stride, dilation)
    )
    if any(o <= 0 for o in outs):
        raise ValueError(f"the convolution output would be empty: input {in_sizes}, kernel {kernel}")
    return pads, outs
'''


@dataclass(frozen=True)
class DepthwiseCode:
    """What the kernel computes after the conv: the epilogue region and how each operand is read."""

    nd: int  # spatial dims of the conv (1 or 2)
    conv_ref: str  # graph name of the conv node (the epilogue's leaf that is the conv output)
    region: Region | None  # elementwise epilogue; None: store the conv output (+ bias)
    per_channel: frozenset[str]  # leaves read at the output channel (a (C, 1, 1) parameter)
    one_element: frozenset[str]  # leaves with a single element

    def leaves(self) -> tuple[Leaf, ...]:
        """Tensor operands of the epilogue besides the conv output."""
        if self.region is None:
            return ()
        return tuple(leaf for leaf in self.region.leaves if leaf.ref != self.conv_ref)

    def scalars(self) -> tuple[Scalar, ...]:
        return self.region.scalars if self.region is not None else ()


def depthwise_constants(kernel_name: str, config: KernelConfig) -> list[str]:
    """Module-level tile constants the launcher reads (what a tuning recipe changes)."""
    limit = ("BLOCK_W_MAX", BLOCK_W_MAX, "output columns per tile at most (contiguous in memory)")
    return tile_constants(kernel_name, config, "[BLOCK_H, BLOCK_W]", limit)


# The kernel: one program accumulates a [BLOCK_H, BLOCK_W] output tile over the unrolled taps, then the bias
# and the epilogue in registers, and stores the tile once.
_KERNEL = '''\
@triton.jit
def $name(
    $params
):
    """Depthwise conv (+ bias$what) in fp32: one program, a [BLOCK_H, BLOCK_W] output tile.

    Output channel co reads input channel co // MULT; taps, stride, padding, dilation are constexpr.
    """
    pid_rows = tl.program_id(0)  # (n, co, block of output rows), decomposed once as scalars
    pid_cols = tl.program_id(1)  # block of BLOCK_W consecutive output columns
    h_block = pid_rows % n_h_blocks
    plane = pid_rows // n_h_blocks  # n * C_OUT + co
    co = plane % C_OUT
    n = plane // C_OUT
    x_plane = x_ptr + (n * C_IN + co // MULT).to(tl.int64) * (H * W)  # 64-bit plane bases
    out_base = plane.to(tl.int64) * (OH * OW)
    w_base = w_ptr + co * (KH * KW)
    oh = h_block * BLOCK_H + tl.arange(0, BLOCK_H)[:, None]
    ow = pid_cols * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    out_mask = (oh < OH) & (ow < OW)
    acc = tl.zeros((BLOCK_H, BLOCK_W), dtype=tl.float32)
    for kh in tl.static_range(KH):
        ih = oh * SH + (kh * DH - PH)
        row_ok = (ih >= 0) & (ih < H)  # rows of the zero padding are never read
        for kw in tl.static_range(KW):
            iw = ow * SW + (kw * DW - PW)
            tap_ok = row_ok & (iw >= 0) & (iw < W)
            w_tap = tl.load(w_base + (kh * KW + kw)).to(tl.float32)  # one scalar per program
            x_tap = tl.load(x_plane + (ih * W + iw), mask=tap_ok, other=0.0).to(tl.float32)
            acc += x_tap * w_tap
    if HAS_BIAS:
        acc += tl.load(b_ptr + co).to(tl.float32)
    out_offs = out_base + (oh * OW + ow)
    $epilogue
    tl.store(out_ptr + out_offs, $result.to(out_ptr.dtype.element_ty), mask=out_mask)
'''


def depthwise_kernel_source(code: DepthwiseCode, kernel_name: str) -> tuple[str, frozenset[str]]:
    """The @triton.jit kernel text and the helper names it calls. Raises NotApplicable on unsupported ops."""
    vars_: dict[str, str] = {code.conv_ref: "acc"}
    vars_.update({leaf.ref: f"ep_{leaf.arg}" for leaf in code.leaves()})
    scalar_args = {s.path: f"sc_{s.arg}" for s in code.scalars()}
    params = ["x_ptr", "w_ptr", "b_ptr", *(f"ep_{leaf.arg}_ptr" for leaf in code.leaves()), "out_ptr"]
    params += ["C_IN", "H", "W", "C_OUT", "OH", "OW", "n_h_blocks", *scalar_args.values()]
    constexprs = "MULT KH KW SH SW PH PW DH DW HAS_BIAS BLOCK_H BLOCK_W".split()
    params += [f"{name}: tl.constexpr" for name in constexprs]
    epilogue, helpers = _epilogue_lines(code, vars_, scalar_args)
    text = template.fill(
        _KERNEL,
        name=kernel_name,
        params=[f"{p}," for p in params],
        what=f", then {code.region.describe()}" if code.region is not None else "",
        epilogue=epilogue,
        result=vars_[code.region.output] if code.region is not None else "acc",
    )
    return text, helpers


def _epilogue_lines(
    code: DepthwiseCode, vars_: dict[str, str], scalar_args: dict[str, str]
) -> tuple[list[str], frozenset[str]]:
    """The epilogue's operand loads and ops, and the helper names they call."""
    if code.region is None:
        return [], frozenset()
    lines = ["# elementwise epilogue in registers: operands loaded once, widened to fp32"]
    for leaf in code.leaves():
        ptr = f"ep_{leaf.arg}_ptr"
        if leaf.ref in code.per_channel:
            load = f"tl.load({ptr} + co)"  # per-channel: one scalar per program
        elif leaf.ref in code.one_element:
            load = f"tl.load({ptr})"
        else:
            load = f"tl.load({ptr} + out_offs, mask=out_mask, other=0.0)"
        lines.append(f"ep_{leaf.arg} = {load}.to(tl.float32)")
    helpers: set[str] = set()
    lines += _emit_nodes(code.region, vars_, scalar_args, helpers)
    return lines, frozenset(helpers)


def _emit_nodes(
    region: Region, vars_: dict[str, str], scalar_args: dict[str, str], helpers: set[str]
) -> list[str]:
    """One comment and one line per epilogue node; adds the helper names the expressions call."""
    local = dict(vars_)
    render = operand_renderer(local, scalar_args)
    lines = []
    for i, node in enumerate(region.nodes):
        emitted = emit_op(node, render)
        helpers |= emitted.helpers
        var = f"v{i}_{node.op}"
        local[node.name] = var
        lines += [f"# {node.op}  ({node.origin})", f"{var} = {emitted.expr}"]
    vars_.update(local)
    return lines


# The launcher: the conv parameters of the call, the depthwise checks, the plane geometry, one launch.
_LAUNCHER = '''\
def $name($signature) -> torch.Tensor:
    """Launch $kernel: the conv parameters are the module's (or the call's), read per call."""
    nd = $nd
    if padding_mode != "zeros":
        raise ValueError(f"padding_mode={padding_mode!r}: only zero padding is implemented")
    if x.dim() != nd + 2 or weight.dim() != nd + 2:
        raise ValueError(f"expected {nd}-d conv tensors, got x {tuple(x.shape)}, \
weight {tuple(weight.shape)}")
    n_images, c_in, c_out = x.shape[0], x.shape[1], weight.shape[0]
    if groups != c_in or weight.shape[1] != 1 or c_out % c_in:
        raise ValueError(f"not a depthwise conv: groups={groups}, input channels {c_in}, weight \
{tuple(weight.shape)}")
    kernel = tuple(weight.shape[2:])
    stride, dilation = conv_tuple(stride, nd), conv_tuple(dilation, nd)
    in_sizes = tuple(x.shape[2:])
    pads, out_sizes = conv_geometry(padding, in_sizes, kernel, stride, dilation)
    plane_in, plane_out = in_sizes, out_sizes
    if nd == 1:  # a 1D conv is a 2D conv over planes of height 1 (one tap, no padding along it)
        kernel, stride, pads, dilation = (1, *kernel), (1, *stride), (0, *pads), (1, *dilation)
        plane_in, plane_out = (1, *in_sizes), (1, *out_sizes)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, pads, dilation
    (in_h, in_w), (out_h, out_w) = plane_in, plane_out
    x = x.contiguous()  # no copy for the usual contiguous input
    weight = weight.contiguous()  # C_out * K taps: negligible
    out = torch.empty((n_images, c_out, *out_sizes), device=x.device, dtype=x.dtype)
    $operand_checks
    if out.numel() == 0:
        return out
    block_w = min(triton.next_power_of_2(out_w), BLOCK_$stem if out_h == 1 else BLOCK_W_MAX_$stem)
    block_h = min(triton.next_power_of_2(out_h), max(BLOCK_$stem // block_w, 1))
    n_h_blocks, n_w_blocks = triton.cdiv(out_h, block_h), triton.cdiv(out_w, block_w)
    # offsets inside one plane are 32-bit, masked lanes included; plane bases are 64-bit in the kernel
    span_h = n_h_blocks * block_h * sh + kh * dh
    span_w = n_w_blocks * block_w * sw + kw * dw
    if max(span_h * (in_w + span_w), n_h_blocks * block_h * out_w + n_w_blocks * block_w) >= 2**31:
        raise ValueError("one plane of this convolution is too large for 32-bit offsets")
    grid = (n_images * c_out * n_h_blocks, n_w_blocks)
    if grid[0] >= 2**31 or grid[1] >= 2**16:
        raise ValueError(f"grid {grid} exceeds the launch limits")
    $kernel[grid](
        x, weight, bias if bias is not None else weight, ${tensors}out,
        c_in, in_h, in_w, c_out, out_h, out_w, n_h_blocks,$scalars
        MULT=c_out // c_in,
        KH=kh, KW=kw, SH=sh, SW=sw, PH=ph, PW=pw, DH=dh, DW=dw,
        HAS_BIAS=bias is not None,
        BLOCK_H=block_h,
        BLOCK_W=block_w,
        num_warps=NUM_WARPS_$stem,
    )
    return out
'''


def depthwise_launcher_source(code: DepthwiseCode, launcher_name: str, kernel_name: str) -> str:
    """The Python function that checks the conv is depthwise, allocates the output and launches the kernel."""
    leaves = [f"ep_{leaf.arg}" for leaf in code.leaves()]
    scalars = [f"sc_{s.arg}" for s in code.scalars()]
    signature = ", ".join(
        [
            "x: torch.Tensor",
            "weight: torch.Tensor",
            "bias: torch.Tensor | None",
            "stride: object",
            "padding: object",
            "dilation: object",
            "groups: int",
            "padding_mode: str",
            *(f"{t}: torch.Tensor" for t in leaves),
            *(f"{s}: float" for s in scalars),
        ]
    )
    return template.fill(
        _LAUNCHER,
        name=launcher_name,
        signature=signature,
        kernel=kernel_name,
        nd=code.nd,
        operand_checks=[
            template.fill(_leaf_check(code, leaf), name=name)
            for leaf, name in zip(code.leaves(), leaves, strict=True)
        ],
        stem=kernel_stem(kernel_name),
        tensors="".join(f"{t}, " for t in leaves),
        scalars="".join(f" {s}," for s in scalars),
    )


# Shape guard and layout of one epilogue operand (the kernel reads it as the analysis classified it).
_PER_CHANNEL_CHECK = """\
if $name.numel() != c_out or $name.dim() < nd + 1 or any(s != 1 for s in $name.shape[-nd:]):
    raise ValueError(f"$name is not per-channel: {tuple($name.shape)}")
$name = $name.contiguous()
"""

_ONE_ELEMENT_CHECK = """\
if $name.numel() != 1:
    raise ValueError(f"$name has {$name.numel()} elements, expected 1")
"""

_FULL_SHAPE_CHECK = """\
if $name.shape != out.shape:
    raise ValueError(f"$name has shape {tuple($name.shape)}, expected {tuple(out.shape)}")
$name = $name.contiguous()
"""


def _leaf_check(code: DepthwiseCode, leaf: Leaf) -> str:
    """The check template for how the kernel reads `leaf`."""
    if leaf.ref in code.per_channel:
        return _PER_CHANNEL_CHECK
    if leaf.ref in code.one_element:
        return _ONE_ELEMENT_CHECK
    return _FULL_SHAPE_CHECK
