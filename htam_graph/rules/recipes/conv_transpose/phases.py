"""The phase decomposition of `algebraic_rewrite.conv_transpose_as_conv`, as the text the generated file
holds.

A transposed convolution sends input i through tap kk to output o = i * s - p + kk * d (per spatial dim). The
outputs of one phase r (o = r + s * m) only see the taps with (r + p - kk * d) % s == 0, every one of them at
input i = m + (r + p - kk * d) // s: a stride-1 correlation of x with those taps, flipped. Each phase is thus
one cuDNN *forward* convolution (dilation d / gcd(s, d), its own padding) with the weight transposed to the
forward layout per group; stride 1 is the one-phase case. The function is plain PyTorch so that the exhaustive
float64 test (tests/unit/test_rules_conv_transpose_math.py) runs the very text every generated file contains.
"""

from __future__ import annotations

__all__ = ["PHASES_SOURCE", "PHASES_FUNCTION"]

PHASES_FUNCTION = "conv_transpose_phases"

PHASES_SOURCE = '''def phase_plan(
    r: int, size: int, out_size: int, k: int, s: int, p: int, d: int
) -> tuple[int, ...] | None:
    """One spatial dim of output phase r (outputs o = r + s * m), or None when no tap reaches it.

    Returns (count, first_tap, last_tap, tap_step, conv_dilation, pad_left, pad_right): the phase has `count`
    outputs, computed by a stride-1 correlation of x (padded by pad_left / pad_right; a negative pad crops)
    with the taps first_tap, first_tap + tap_step, ..., last_tap in reverse order, spaced conv_dilation apart.
    """
    count = max(0, (out_size - r + s - 1) // s)
    taps = [kk for kk in range(k) if (r + p - kk * d) % s == 0]
    if not taps:
        return None
    step = taps[1] - taps[0] if len(taps) > 1 else 1
    conv_dilation = step * d // s if len(taps) > 1 else 1  # consecutive taps are step * d / s inputs apart
    # the last tap reads the lowest input: it is the flipped kernel's first tap, at input m + base
    base = (r + p - taps[-1] * d) // s
    pad_left = -base
    pad_right = count + (len(taps) - 1) * conv_dilation - size - pad_left
    return count, taps[0], taps[-1], step, conv_dilation, pad_left, pad_right


def conv_transpose_phases(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    output_padding: tuple[int, ...],
    dilation: tuple[int, ...],
    groups: int,
) -> tuple[tuple[int, ...], list[tuple[tuple[int, ...], torch.Tensor]]]:
    """conv_transpose{1,2,3}d(x, weight, bias, ...) as forward convolutions, one per output phase.

    Returns the output's spatial sizes and, for every phase r that has outputs, (r, y_r) with y_r[..., m] the
    output at o = r + stride * m per spatial dim (bias included exactly once; a phase that no tap reaches is
    the bias alone, or zero, as a stride-0 view). y_r may be a strided view. The weight is transposed,
    flipped and split on every call (it is tiny), so a changed weight changes the output.
    """
    nd = x.dim() - 2
    sizes = tuple(x.shape[2:])
    kernel = tuple(weight.shape[2:])
    dims = list(zip(sizes, kernel, stride, padding, output_padding, dilation, strict=True))
    out_sizes = tuple((i - 1) * s - 2 * p + d * (k - 1) + op + 1 for i, k, s, p, op, d in dims)
    c_in, c_out_per_group = weight.shape[0], weight.shape[1]
    c_out = groups * c_out_per_group
    # (Cin, Cout/g, k...) -> (g, Cin/g, Cout/g, k...) -> (g, Cout/g, Cin/g, k...) -> (Cout, Cin/g, k...)
    w = weight.reshape(groups, c_in // groups, c_out_per_group, *kernel).transpose(1, 2)
    w = w.reshape(c_out, c_in // groups, *kernel)
    conv = (torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d)[nd - 1]
    phases: list[tuple[int, ...]] = [()]
    for s in stride:
        phases = [phase + (r,) for phase in phases for r in range(s)]
    results = []
    for phase in phases:
        counts = [max(0, (o - r + s - 1) // s) for r, o, s in zip(phase, out_sizes, stride, strict=True)]
        if min(counts) == 0:  # an output dim shorter than the stride has no element in this phase
            continue
        shape = (x.shape[0], c_out, *counts)
        plans = [
            phase_plan(r, i, o, k, s, p, d)
            for r, (i, k, s, p, _, d), o in zip(phase, dims, out_sizes, strict=True)
        ]
        crops = [] if None in plans else [(max(0, -pl[5]), max(0, -pl[6])) for pl in plans]
        if None in plans or any(size - lo - hi <= 0 for size, (lo, hi) in zip(sizes, crops, strict=True)):
            # no tap reaches this phase (or every input it could read is cropped away): bias only
            fill = bias if bias is not None else x.new_zeros(c_out)
            results.append((phase, fill.view(1, c_out, *([1] * nd)).expand(shape)))
            continue
        taps = tuple(slice(pl[1], pl[2] + 1, pl[3]) for pl in plans)
        sub_weight = w[(slice(None), slice(None), *taps)].flip(list(range(2, 2 + nd)))
        window = tuple(slice(lo, size - hi) for size, (lo, hi) in zip(sizes, crops, strict=True))
        # conv padding is symmetric: pad both sides by the larger pad, then keep the `count` wanted outputs
        pads = [max(0, pl[5], pl[6]) for pl in plans]
        out = conv(
            x[(slice(None), slice(None), *window)],
            sub_weight,
            bias,
            padding=tuple(pads),
            dilation=tuple(pl[4] for pl in plans),
            groups=groups,
        )
        keep = tuple(
            slice(pad - max(0, pl[5]), pad - max(0, pl[5]) + pl[0]) for pad, pl in zip(pads, plans, \
strict=True)
        )
        results.append((phase, out[(slice(None), slice(None), *keep)]))
    return out_sizes, results
'''
