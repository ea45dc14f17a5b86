"""The 3xTF32 tensor-core convolution a candidate file carries, and the forward expression that calls it.

A forward convolution (conv1d / conv2d / conv3d, groups 1, zero padding) is an implicit GEMM: the output
pixels (N * OD * OH * OW) are GEMM rows M, the output channels GEMM columns N, and the taps times the input
channels (KD * KH * KW * C_in) the reduction K. The launcher copies the input to channels-last once per call
(N, D, H, W, C), so K is ordered (kd, kh, kw, c_in) and consecutive K of a tap are contiguous channels: A's
rows are gathered from the input with masks only where the window crosses the padding. B is the weight copied
per call to [C_out, K] in the same K order (K contiguous, which Hopper's TF32 MMA reads best), zero-padded to
whole BLOCK_K tiles. The kernel accumulates `tl.dot(..., input_precision="tf32x3")` in fp32 and writes the
NCDHW (NCHW, NCL) result PyTorch returns, the bias added in the same pass. cuDNN's fp32 convolutions run on
the CUDA cores with TF32 off, as the fp32-strict evaluation pins it.
"""

from __future__ import annotations

import math

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.compose.torch_calls import tensor_expr
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpNode, Ref, Value

__all__ = [
    "CONV_KERNEL_SOURCE",
    "CONV_LAUNCHER_SOURCE",
    "CONV_OPS",
    "conv_call",
    "conv_compute_bound",
    "conv_size",
]

CONV_OPS = frozenset({"conv1d", "conv2d", "conv3d"})
# Below this many multiply-adds the conv is launch- or memory-bound: cuDNN stays.
MIN_MACS = 2**26
MIN_CHANNELS_OUT = 16  # tl.dot needs at least 16 columns
MIN_K = 16  # taps x input channels: a shorter reduction (a 1x1 conv of few channels) is memory-bound
MIN_PIXELS = 64  # output pixels (GEMM rows)

CONV_KERNEL_SOURCE = '''\
@triton.jit
def tf32x3_conv_kernel(
    x_ptr, w_ptr, bias_ptr, y_ptr,
    M, C_OUT, K,
    IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W,
    stride_xn, stride_xd, stride_xh, stride_xw, stride_wn,
    C_IN: tl.constexpr,
    KH: tl.constexpr, KW: tl.constexpr,
    SD: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
    PD: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
    DD: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
    MASK_D: tl.constexpr, MASK_H: tl.constexpr, MASK_W: tl.constexpr,
    TAP_ALIGNED: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """Y[n, co, od, oh, ow] = sum over (kd, kh, kw, c) of X[n, od*SD-PD+kd*DD, .., c] * W[co, kd, kh, kw, c].

    The input is channels-last (stride 1 along C), the weight [C_OUT, K] with K = (kd, kh, kw, c) contiguous
    and zero-padded to whole BLOCK_K tiles. Rows M are output pixels (n, od, oh, ow), columns the output
    channels. MASK_*: the window can leave the input along that dim (padding), so A's loads are masked there.
    TAP_ALIGNED: C_IN is a multiple of BLOCK_K, so each K tile lies in one tap and its offsets and masks are
    per row; otherwise every K element decodes its own tap. Out-of-range rows and columns read row / column 0
    and are not stored.
    """
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(C_OUT, BLOCK_N)
    group_size = GROUP_M * tiles_n
    first_m = (pid // group_size) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % rows_in_group
    pid_n = (pid % group_size) // rows_in_group
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rm_in = tl.where(rm < M, rm, 0)
    rn_in = tl.where(rn < C_OUT, rn, 0)
    ow = rm_in % OUT_W
    oh = (rm_in // OUT_W) % OUT_H
    od = (rm_in // (OUT_W * OUT_H)) % OUT_D
    n = rm_in // (OUT_W * OUT_H * OUT_D)
    id0 = od * SD - PD  # the window's first input position, per row
    ih0 = oh * SH - PH
    iw0 = ow * SW - PW
    x_rows = x_ptr + n.to(tl.int64) * stride_xn + id0 * stride_xd + ih0 * stride_xh + iw0 * stride_xw
    rk = tl.arange(0, BLOCK_K)
    w_ptrs = w_ptr + rn_in[None, :] * stride_wn + rk[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if TAP_ALIGNED:
            tap = k0 // C_IN
            kw = tap % KW
            kh = (tap // KW) % KH
            kd = tap // (KW * KH)
            tap_off = kd * DD * stride_xd + kh * DH * stride_xh + kw * DW * stride_xw
            a_ptrs = (x_rows + tap_off)[:, None] + (k0 - tap * C_IN + rk)[None, :]
            if MASK_D or MASK_H or MASK_W:  # per row: the tap's input position lies in the input
                ok = (id0 + kd * DD >= 0) & (id0 + kd * DD < IN_D) & (ih0 + kh * DH >= 0)
                ok &= (ih0 + kh * DH < IN_H) & (iw0 + kw * DW >= 0) & (iw0 + kw * DW < IN_W)
                a = tl.load(a_ptrs, mask=ok[:, None], other=0.0)
            else:
                a = tl.load(a_ptrs)
        else:
            k = k0 + rk
            tap = k // C_IN
            kw = tap % KW
            kh = (tap // KW) % KH
            kd = tap // (KW * KH)
            k_off = kd * DD * stride_xd + kh * DH * stride_xh + kw * DW * stride_xw + k % C_IN
            a_ptrs = x_rows[:, None] + k_off[None, :]
            ok = (k < K)[None, :]
            if MASK_D:
                pos = id0[:, None] + (kd * DD)[None, :]
                ok = ok & (pos >= 0) & (pos < IN_D)
            if MASK_H:
                pos = ih0[:, None] + (kh * DH)[None, :]
                ok = ok & (pos >= 0) & (pos < IN_H)
            if MASK_W:
                pos = iw0[:, None] + (kw * DW)[None, :]
                ok = ok & (pos >= 0) & (pos < IN_W)
            a = tl.load(a_ptrs, mask=ok, other=0.0)
        b = tl.load(w_ptrs)
        acc = tl.dot(a, b, acc, input_precision="tf32x3")  # 3xTF32: fp32-level accuracy on tensor cores
        w_ptrs += BLOCK_K
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn_in)[None, :]
    pixels = OUT_D * OUT_H * OUT_W
    image = n.to(tl.int64) * C_OUT * pixels + (rm_in - n * pixels)
    y_ptrs = y_ptr + image[:, None] + rn_in.to(tl.int64)[None, :] * pixels
    tl.store(y_ptrs, acc, mask=(rm[:, None] < M) & (rn[None, :] < C_OUT))'''

CONV_LAUNCHER_SOURCE = '''\
def conv_tiles(m: int, c_out: int, c_in: int, k: int) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) of the conv kernel for M output pixels, C_out
    channels and K = taps x C_in. BLOCK_K divides C_in where it can (one tap per K tile). 64-wide K tiles
    only with 128-wide N tiles: on the H200 a 64x3x3 -> 64 conv ran 0.85x of cuDNN with 128x64x64 tiles and
    1.38x with 128x64x32 (results/h200/rules_tensor_core_conv_2026-12-02/conv_table.md)."""
    block_n = 128 if c_out >= 128 else 64 if c_out > 32 else 32 if c_out > 16 else 16
    widths = (64, 32, 16) if block_n >= 128 else (32, 16)
    block_k = next((b for b in widths if c_in % b == 0), 32)
    return 128, block_n, block_k, 8 if block_n >= 128 else 4, 3


def tf32x3_conv(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride: object = 1,
    padding: object = 0, dilation: object = 1, groups: int = 1, padding_mode: str = "zeros",
) -> torch.Tensor:
    """torch.nn.functional.conv{1,2,3}d(x, weight, bias, stride, padding, dilation) for fp32 tensors,
    groups 1 and zero padding, as an implicit GEMM on tensor cores in 3xTF32; the result is contiguous
    (N, C_out, *out)."""
    nd = weight.dim() - 2
    if nd not in (1, 2, 3) or x.dim() != nd + 2:
        raise ValueError(f"tf32x3_conv: input {tuple(x.shape)} and weight {tuple(weight.shape)} do not match")
    if groups != 1 or padding_mode != "zeros":
        raise ValueError(f"tf32x3_conv: groups={groups}, padding_mode={padding_mode!r} (1 and 'zeros' only)")
    if x.dtype != torch.float32 or weight.dtype != torch.float32 or x.shape[1] != weight.shape[1]:
        shapes = f"{x.dtype} input {tuple(x.shape)}, {weight.dtype} weight {tuple(weight.shape)}"
        raise ValueError(f"tf32x3_conv: fp32 tensors of the same channels only, not {shapes}")
    n, c_in, c_out = x.shape[0], x.shape[1], weight.shape[0]
    kernel, in_sizes = tuple(weight.shape[2:]), tuple(x.shape[2:])
    stride, dilation = conv_tuple(stride, nd), conv_tuple(dilation, nd)
    pads, out_sizes = conv_geometry(padding, in_sizes, kernel, stride, dilation)
    y = torch.empty((n, c_out, *out_sizes), device=x.device, dtype=torch.float32)
    m, k = n * math.prod(out_sizes), c_in * math.prod(kernel)
    if k == 0:
        raise ValueError("tf32x3_conv: a convolution of no input channels")
    if y.numel() == 0:
        return y
    if m >= 2**31 or x[0].numel() >= 2**31:  # rows and offsets within one image are 32-bit in the kernel
        raise ValueError(f"tf32x3_conv: input {tuple(x.shape)} is too large for 32-bit row offsets")
    block_m, block_n, block_k, warps, stages = conv_tiles(m, c_out, c_in, k)
    # B: [C_out, K], K ordered (kd, kh, kw, c_in) as the channels-last input, zero-padded to whole K tiles
    w = torch.nn.functional.pad(weight.movedim(1, -1).reshape(c_out, k), (0, -k % block_k)).contiguous()
    x_cl = x.movedim(1, -1).contiguous()  # N, *spatial, C: one copy per call (none if already channels-last)
    lead = 3 - nd  # a 1-D / 2-D conv is a 3-D one with leading size-1 dims
    ins, outs = (1,) * lead + in_sizes, (1,) * lead + tuple(out_sizes)
    ks, ss = (1,) * lead + kernel, (1,) * lead + stride
    ps, ds = (0,) * lead + tuple(pads), (1,) * lead + dilation
    x_strides = (0,) * lead + x_cl.stride()[1:-1]
    # a dim needs masks when the window can leave the input there: leading padding or a trailing overhang
    geometry = zip(ins, outs, ks, ss, ps, ds)
    masks = [p > 0 or (o - 1) * s - p + (kk - 1) * d >= i for i, o, kk, s, p, d in geometry]
    tiles = triton.cdiv(m, block_m) * triton.cdiv(c_out, block_n)
    tf32x3_conv_kernel[(tiles,)](
        x_cl, w, bias.contiguous() if bias is not None else w, y,
        m, c_out, k, *ins, *outs,
        x_cl.stride(0), *x_strides, w.stride(0),
        C_IN=c_in, KH=ks[1], KW=ks[2],
        SD=ss[0], SH=ss[1], SW=ss[2], PD=ps[0], PH=ps[1], PW=ps[2], DD=ds[0], DH=ds[1], DW=ds[2],
        MASK_D=masks[0], MASK_H=masks[1], MASK_W=masks[2],
        TAP_ALIGNED=c_in % block_k == 0,
        HAS_BIAS=bias is not None,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8,
        num_warps=warps, num_stages=stages,
    )
    return y'''


def conv_size(graph: OpGraph, node: OpNode) -> tuple[int, int, int]:
    """(M, N, K) of a conv node's implicit GEMM at the analysed sizes: output pixels, output channels,
    taps x input channels. NotApplicable when the launcher cannot run it (a grouped or non-fp32 conv)."""
    if node.op not in CONV_OPS:
        raise NotApplicable(f"{node.op} is not a forward convolution")
    x, w = (_operand_shape(graph, v) for v in node.operands[:2])
    nd = len(node.shape) - 2
    if len(x) != nd + 2 or len(w) != nd + 2:
        raise NotApplicable(f"{node.op} of input {x} and weight {w}")
    if w[1] != x[1] or _param(node, "groups", 1) != 1:
        raise NotApplicable(f"{node.op} is grouped (weight {w}, {x[1]} input channels)")
    if node.dtype not in ("", "torch.float32"):
        raise NotApplicable(f"{node.op} computes in {node.dtype}, not fp32")
    if isinstance(_param(node, "padding", 0), str) and _param(node, "padding", 0) not in ("same", "valid"):
        raise NotApplicable(f"{node.op} with padding {_param(node, 'padding', 0)!r}")
    return node.shape[0] * math.prod(node.shape[2:]), w[0], math.prod(w[1:])


def conv_compute_bound(graph: OpGraph, node: OpNode) -> bool:
    """Whether a conv is large enough for the tensor-core kernel to pay off (MIN_MACS) with a wide enough
    output (MIN_CHANNELS_OUT, MIN_PIXELS) and reduction (MIN_K)."""
    try:
        m, n, k = conv_size(graph, node)
    except NotApplicable:
        return False
    return m >= MIN_PIXELS and n >= MIN_CHANNELS_OUT and k >= MIN_K and m * n * k >= MIN_MACS


def conv_call(graph: OpGraph, node: OpNode, computed: dict[str, str]) -> str:
    """The forward expression computing `node` with `tf32x3_conv` (its comment included): a module's weight,
    bias and geometry are read from the module at every call."""
    x, weight = (tensor_expr(graph, v, computed) for v in node.operands[:2])
    bias = node.operands[2] if len(node.operands) > 2 else Const(None)
    bias_expr = tensor_expr(graph, bias, computed) if isinstance(bias, Ref) else "None"
    if bias_expr == "None" and bias != Const(None):
        raise NotApplicable(f"{node.op} with a bias {bias!r} that is not a tensor")
    if node.module_path is not None:
        if not all(part.isidentifier() for part in node.module_path.split(".")):
            raise NotApplicable("the conv lives in an indexed container (nn.Sequential): no attribute path")
        m = f"self.{node.module_path}"
        geometry = [f"{m}.{a}" for a in ("stride", "padding", "dilation", "groups", "padding_mode")]
    else:
        params = dict(node.params)
        geometry = [
            _arg(params.get(name, Const(default)))
            for name, default in (("stride", 1), ("padding", 0), ("dilation", 1), ("groups", 1))
        ]
    args = ", ".join([x, weight, bias_expr, *geometry])
    return f"tf32x3_conv({args})  # Triton: 3xTF32 implicit-GEMM conv ({node.origin or node.op})"


def _param(node: OpNode, name: str, default: object) -> object:
    """A functional conv's literal parameter (a module's live on the module: the default here)."""
    value = dict(node.params).get(name, Const(default))
    return value.value if isinstance(value, Const | AttrScalar) else value


def _arg(value: Value) -> str:
    if isinstance(value, AttrScalar):
        return f"self.{value.path}"
    if isinstance(value, Const):
        return repr(value.value)
    raise NotApplicable(f"a conv parameter {value!r} computed in the forward")


def _operand_shape(graph: OpGraph, value: object) -> tuple[int, ...]:
    if not isinstance(value, Ref):
        raise NotApplicable(f"a conv operand {value!r} is not a tensor")
    return tuple(graph.shape_of(value.name))
