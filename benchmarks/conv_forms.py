"""Where do the convolution-heavy tasks lose time, and which formulation of the same op is faster on this GPU?

An exploration run, one process on an otherwise idle GPU, fp32 with TF32 off, timed with the runtime's protocol
(kernels_runtime.worker.timing_protocol.time_interleaved: L2 flushed before each call, median of 20 after 3 warm-ups; the results
of 2026-11-30 were taken with the older sync-in-window protocol, now `protocol=SYNC_IN_WINDOW`). Every alternative is checked against the library op it replaces (max abs error printed;
the loop's evaluator applies rtol = atol = 1e-4 to whole tasks).

Sections (each prints a Markdown table):
- transposed convolutions: cuDNN's conv_transpose against the same op through cuDNN's forward convolution
  (stride 1: flipped, transposed weights; stride > 1: one forward conv per output phase, written into the
  strided output view), both with the per-call weight transform included;
- forward convolutions of the level2 tasks torch.compile wins most: with and without bias, channels-last, and
  torch.compile of the conv module alone;
- depthwise 2D convolution: cuDNN against a direct Triton kernel (one output tile per program, fp32 accumulate);
- 1D average pooling: cuDNN/ATen against a row-tiled Triton kernel (no per-element index division).

Usage (GPU machine): python benchmarks/conv_forms.py KERNELBENCH_DIR
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from htam_graph.kernels_runtime.worker import timing_protocol
from htam_graph.kernels_runtime.worker.taskmod import load_task_module

_CONV_FWD = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _task(kb: Path, rel: str) -> tuple[torch.nn.Module, list[object]]:
    path = kb / rel
    module = load_task_module(path.read_text(encoding="utf-8"), path.stem, {})
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = module.Model(*module.get_init_inputs()).eval()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    return model, inputs


def _first(model: torch.nn.Module, kinds: tuple[type, ...]) -> torch.nn.Module:
    return next(m for m in model.modules() if isinstance(m, kinds))


def _input_of(model: torch.nn.Module, sub: torch.nn.Module, inputs: list[object]) -> torch.Tensor:
    """The tensor `sub` receives when the reference forward runs on `inputs`."""
    seen: list[torch.Tensor] = []
    handle = sub.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    with torch.no_grad():
        model(*inputs)
    handle.remove()
    return seen[0]


def _time(fns: dict[str, Callable[[], object]]) -> dict[str, float]:
    t = timing_protocol.time_interleaved(fns, torch.device("cuda"), runs=20, warmup=3)
    return {name: t.median_us(name) for name in fns}


# ---------------------------------------------------------------- transposed conv through forward convs


def _phase_taps(k: int, s: int, p: int, r: int) -> tuple[list[int], int]:
    """Taps kk of a stride-s transposed conv (dilation 1) feeding outputs o ≡ r (mod s), in the order a forward
    correlation reads them, and the input offset c of the first: y[s*q + r] = Σ_j x[q + c + j] · W[taps[j]]."""
    taps = [kk for kk in range(k) if (r + p - kk) % s == 0]
    taps.sort(reverse=True)  # the input offset (r + p - kk) / s grows by one per tap in this order
    c = (r + p - taps[0]) // s if taps else 0
    return taps, c


def conv_transpose_by_phases(x: torch.Tensor, ct: torch.nn.modules.conv._ConvTransposeNd) -> torch.Tensor:
    """ct(x) (groups 1, dilation 1) as one cuDNN forward convolution per output phase."""
    nd = x.dim() - 2
    k, s, p, op = ct.kernel_size, ct.stride, ct.padding, ct.output_padding
    if ct.groups != 1 or any(d != 1 for d in ct.dilation):
        raise ValueError("exploration covers groups 1 and dilation 1 only")
    lin = x.shape[2:]
    lout = [(lin[i] - 1) * s[i] - 2 * p[i] + k[i] + op[i] for i in range(nd)]
    w = ct.weight.transpose(0, 1)  # (Cout, Cin, k...)
    y = torch.empty((x.shape[0], w.shape[0], *lout), device=x.device, dtype=x.dtype)
    for phase in itertools.product(*(range(si) for si in s)):
        taps, offs, counts = [], [], []
        for i, r in enumerate(phase):
            t, c = _phase_taps(k[i], s[i], p[i], r)
            taps.append(t)
            offs.append(c)
            counts.append(len(range(r, lout[i], s[i])))
        view = y[(slice(None), slice(None), *(slice(r, None, si) for r, si in zip(phase, s, strict=True)))]
        if any(n == 0 for n in counts):
            continue
        if any(not t for t in taps):
            view.copy_(ct.bias.view(-1, *([1] * nd)).expand_as(view) if ct.bias is not None else 0.0)
            continue
        sub = w
        for i, t in enumerate(taps):
            sub = sub.index_select(2 + i, torch.tensor(t, device=w.device))
        pads: list[int] = []
        starts = []
        for i in range(nd):  # F.pad takes the last dim first
            lo = max(0, -offs[i])
            hi = max(0, counts[i] - 1 + offs[i] + len(taps[i]) - 1 - (lin[i] - 1))
            pads = [lo, hi, *pads]
            starts.append(offs[i] + lo)
        xp = F.pad(x, pads) if any(pads) else x
        xp = xp[(slice(None), slice(None), *(slice(st, None) for st in starts))]
        out = _CONV_FWD[nd](xp, sub, ct.bias)
        view.copy_(out[(slice(None), slice(None), *(slice(0, n) for n in counts))])
    return y


def conv_transpose_by_flip(x: torch.Tensor, ct: torch.nn.modules.conv._ConvTransposeNd) -> torch.Tensor:
    """ct(x) for stride 1, groups 1, dilation 1, output_padding 0 as one cuDNN forward conv."""
    nd = x.dim() - 2
    w = ct.weight.transpose(0, 1).flip(list(range(2, 2 + nd)))
    pad = [ct.kernel_size[i] - 1 - ct.padding[i] for i in range(nd)]
    return _CONV_FWD[nd](x, w, ct.bias, padding=pad)


def section_transposed(kb: Path, tasks: list[str]) -> None:
    print("\n## Transposed convolutions: cuDNN conv_transpose vs the same op through forward convolutions\n")
    print("| task | conv_transpose µs | forward form | forward µs | speedup | max abs err |")
    print("|---|---:|---|---:|---:|---:|")
    for rel in tasks:
        _one_transposed(kb, rel)
        torch.cuda.empty_cache()


def _one_transposed(kb: Path, rel: str) -> None:
    model, inputs = _task(kb, rel)
    ct = _first(model, (torch.nn.modules.conv._ConvTransposeNd,))
    x = _input_of(model, ct, inputs)
    stride1 = all(si == 1 for si in ct.stride)
    form = "flip" if stride1 else "phases"
    alt = conv_transpose_by_flip if stride1 else conv_transpose_by_phases
    with torch.no_grad():
        err = (alt(x, ct) - ct(x)).abs().max().item()
        t = _time({"ct": lambda: ct(x), "alt": lambda: alt(x, ct)})
    print(
        f"| {rel} | {t['ct']:.0f} | {form} | {t['alt']:.0f} | {t['ct'] / t['alt']:.2f} | {err:.1e} |",
        flush=True,
    )


# ---------------------------------------------------------------- forward convs


def section_forward(kb: Path, tasks: list[str]) -> None:
    print("\n## Forward convolutions: bias, channels-last, torch.compile of the conv alone (µs)\n")
    print(
        "| task | conv | conv, no bias | channels-last (incl. copy) | compiled conv | whole task eager | whole task compiled |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for rel in tasks:
        _one_forward(kb, rel)
        torch._dynamo.reset()
        torch.cuda.empty_cache()


def _one_forward(kb: Path, rel: str) -> None:
    model, inputs = _task(kb, rel)
    conv = _first(model, (torch.nn.modules.conv._ConvNd,))
    x = _input_of(model, conv, inputs)
    fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
    w_cl = conv.weight.detach().to(memory_format=fmt)
    fwd = _CONV_FWD[x.dim() - 2]
    kw = {
        "stride": conv.stride,
        "padding": conv.padding,
        "dilation": conv.dilation,
        "groups": conv.groups,
    }
    with torch.no_grad():
        compiled_conv = torch.compile(conv)
        compiled_model = torch.compile(model)
        compiled_conv(x)
        compiled_model(*inputs)
        t = _time(
            {
                "conv": lambda: conv(x),
                "nobias": lambda: fwd(x, conv.weight, None, **kw),
                "cl": lambda: fwd(x.contiguous(memory_format=fmt), w_cl, conv.bias, **kw),
                "cconv": lambda: compiled_conv(x),
                "task": lambda: model(*inputs),
                "ctask": lambda: compiled_model(*inputs),
            }
        )
    print(
        f"| {rel} | {t['conv']:.0f} | {t['nobias']:.0f} | {t['cl']:.0f} | {t['cconv']:.0f} | {t['task']:.0f} "
        f"| {t['ctask']:.0f} |",
        flush=True,
    )


# ---------------------------------------------------------------- depthwise conv


@triton.jit
def _depthwise_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    C,
    H,
    W,
    OH,
    OW,
    n_hblocks,
    KH: tl.constexpr,
    KW: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    row = tl.program_id(0)  # (plane, block of BLOCK_H output rows)
    hb = row % n_hblocks
    plane = row // n_hblocks
    c = plane % C
    oh = hb * BLOCK_H + tl.arange(0, BLOCK_H)[:, None]
    ow = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    out_mask = (oh < OH) & (ow < OW)
    x_base = x_ptr + plane.to(tl.int64) * H * W
    acc = tl.zeros([BLOCK_H, BLOCK_W], tl.float32)
    for kh in tl.static_range(KH):
        for kw in tl.static_range(KW):
            wv = tl.load(w_ptr + c * KH * KW + kh * KW + kw)
            xv = tl.load(x_base + (oh + kh) * W + (ow + kw), mask=out_mask, other=0.0)
            acc += xv * wv
    tl.store(y_ptr + plane.to(tl.int64) * OH * OW + oh * OW + ow, acc, mask=out_mask)


def depthwise_triton(
    x: torch.Tensor, w: torch.Tensor, block_h: int, block_w: int, warps: int
) -> torch.Tensor:
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    oh, ow = h - kh + 1, wd - kw + 1
    y = torch.empty((n, c, oh, ow), device=x.device, dtype=x.dtype)
    n_hblocks = triton.cdiv(oh, block_h)
    grid = (n * c * n_hblocks, triton.cdiv(ow, block_w))
    _depthwise_kernel[grid](
        x, w, y, c, h, wd, oh, ow, n_hblocks, KH=kh, KW=kw, BLOCK_H=block_h, BLOCK_W=block_w, num_warps=warps
    )
    return y


def section_depthwise(kb: Path, tasks: list[str]) -> None:
    print("\n## Depthwise 2D conv (stride 1, no padding): cuDNN vs a direct Triton kernel (µs)\n")
    configs = [(4, 128, 4), (8, 128, 4), (8, 256, 8), (16, 64, 4), (2, 256, 4)]
    print(
        "| task | cuDNN | " + " | ".join(f"triton {h}x{w} w{n}" for h, w, n in configs) + " | max abs err |"
    )
    print("|---|---:|" + "---:|" * len(configs) + "---:|")
    for rel in tasks:
        _one_depthwise(kb, rel, configs)
        torch.cuda.empty_cache()


def _one_depthwise(kb: Path, rel: str, configs: list[tuple[int, int, int]]) -> None:
    model, inputs = _task(kb, rel)
    conv = _first(model, (torch.nn.Conv2d,))
    x = _input_of(model, conv, inputs)
    if conv.padding != (0, 0) or conv.stride != (1, 1) or conv.dilation != (1, 1) or conv.bias is not None:
        raise ValueError(f"{rel}: the exploration kernel covers stride 1, no padding, no bias only")
    w = conv.weight.detach()
    fns: dict[str, Callable[[], object]] = {"cudnn": lambda: conv(x)}
    for h, wb, n in configs:
        fns[f"{h}x{wb}w{n}"] = lambda h=h, wb=wb, n=n: depthwise_triton(x, w, h, wb, n)
    with torch.no_grad():
        err = (depthwise_triton(x, w, *configs[0]) - conv(x)).abs().max().item()
        t = _time(fns)
    cells = " | ".join(f"{t[f'{h}x{wb}w{n}']:.0f}" for h, wb, n in configs)
    print(f"| {rel} | {t['cudnn']:.0f} | {cells} | {err:.1e} |", flush=True)


# ---------------------------------------------------------------- 1D average pooling


@triton.jit
def _avgpool1d_rows(
    x_ptr, y_ptr, L, OL, K: tl.constexpr, S: tl.constexpr, P: tl.constexpr, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    o = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for kk in tl.static_range(K):
        i = o * S - P + kk
        acc += tl.load(x_ptr + row * L + i, mask=(i >= 0) & (i < L) & (o < OL), other=0.0)
    tl.store(y_ptr + row * OL + o, acc / K, mask=o < OL)


def section_avgpool1d(kb: Path, rel: str) -> None:
    print("\n## AvgPool1d (count_include_pad): ATen vs a row-tiled Triton kernel (µs)\n")
    model, inputs = _task(kb, rel)
    pool = _first(model, (torch.nn.AvgPool1d,))
    x = inputs[0]
    k, s, p = pool.kernel_size[0], pool.stride[0], pool.padding[0]
    rows, length = x.shape[0] * x.shape[1], x.shape[2]
    ol = (length + 2 * p - k) // s + 1

    def run(block: int, warps: int) -> torch.Tensor:
        y = torch.empty((*x.shape[:2], ol), device=x.device)
        _avgpool1d_rows[(rows, triton.cdiv(ol, block))](
            x, y, length, ol, K=k, S=s, P=p, BLOCK=block, num_warps=warps
        )
        return y

    configs = [(512, 4), (1024, 4), (2048, 8), (4096, 8)]
    compiled = torch.compile(model)
    with torch.no_grad():
        compiled(*inputs)
        err = (run(1024, 4) - pool(x)).abs().max().item()
        fns: dict[str, Callable[[], object]] = {"aten": lambda: pool(x), "compile": lambda: compiled(*inputs)}
        for b, n in configs:
            fns[f"{b}w{n}"] = lambda b=b, n=n: run(b, n)
        t = _time(fns)
    print(
        "| aten | torch.compile | " + " | ".join(f"triton {b} w{n}" for b, n in configs) + " | max abs err |"
    )
    print("|---:|---:|" + "---:|" * len(configs) + "---:|")
    print(
        f"| {t['aten']:.0f} | {t['compile']:.0f} | "
        + " | ".join(f"{t[f'{b}w{n}']:.0f}" for b, n in configs)
        + f" | {err:.1e} |"
    )


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    kb = Path(sys.argv[1])
    print(
        f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}, fp32, TF32 off"
    )
    section_transposed(
        kb,
        [
            "level1/68_conv_transposed_3D__square_input__asymmetric_kernel.py",
            "level1/70_conv_transposed_3D__asymmetric_input__square_kernel.py",
            "level1/78_conv_transposed_2D_asymmetric_input_asymmetric_kernel___padded__.py",
            "level1/64_conv_transposed_1D.py",
            "level1/58_conv_transposed_3D__asymmetric_input__asymmetric_kernel.py",
            "level2/100_ConvTranspose3d_Clamp_Min_Divide.py",
            "level2/78_ConvTranspose3d_Max_Max_Sum.py",
            "level2/34_ConvTranspose3d_LayerNorm_GELU_Scaling.py",
            "level2/16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling.py",
            "level2/26_ConvTranspose3d_Add_HardSwish.py",
            "level2/10_ConvTranspose2d_MaxPool_Hardtanh_Mean_Tanh.py",
            "level2/42_ConvTranspose2d_GlobalAvgPool_BiasAdd_LogSumExp_Sum_Multiply.py",
        ],
    )
    section_depthwise(
        kb,
        [
            "level1/82_conv_depthwise_2D_square_input_square_kernel.py",
            "level1/84_conv_depthwise_2D_asymmetric_input_square_kernel.py",
        ],
    )
    section_avgpool1d(kb, "level1/44_Average_Pooling_1D.py")
    section_forward(
        kb,
        [
            "level2/48_Conv3d_Scaling_Tanh_Multiply_Sigmoid.py",
            "level2/90_Conv3d_LeakyReLU_Sum_Clamp_GELU.py",
            "level2/52_Conv2d_Activation_BatchNorm.py",
        ],
    )


if __name__ == "__main__":
    main()
