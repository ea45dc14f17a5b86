"""The phase decomposition every conv_transpose_as_conv file contains, exhaustively against F.conv_transpose (float64).

The function under test is the exact text the recipe emits (`PHASES_SOURCE`), executed here; each phase is
written into its strided view of the output, which is what the generated Triton kernel does on the GPU.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from htam_graph.rules.recipes.conv_transpose.phases import PHASES_FUNCTION, PHASES_SOURCE

_TRANSPOSED = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def phases_function() -> Any:
    namespace: dict[str, Any] = {"torch": torch}
    exec(PHASES_SOURCE, namespace)  # noqa: S102 - the generated text itself is what is tested
    return namespace[PHASES_FUNCTION]


PHASES = phases_function()


def assemble(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, **kw: Any) -> torch.Tensor:
    """The transposed conv from its phases; NaN-filled first so that a phase that writes nothing shows."""
    nd = x.dim() - 2
    args = [kw[name] for name in ("stride", "padding", "output_padding", "dilation")]
    out_sizes, phases = PHASES(x, weight, bias, *(tuple(a) for a in args), kw["groups"])
    y = torch.full((x.shape[0], weight.shape[1] * kw["groups"], *out_sizes), float("nan"), dtype=x.dtype)
    seen: set[tuple[int, ...]] = set()
    for phase, part in phases:
        assert phase not in seen
        seen.add(phase)
        view = y[
            (slice(None), slice(None), *(slice(r, None, s) for r, s in zip(phase, kw["stride"], strict=True)))
        ]
        assert view.shape == part.shape, (phase, view.shape, part.shape)
        view.copy_(part)
    assert len(phases) <= torch.tensor(kw["stride"]).prod().item()
    assert y.dim() == nd + 2
    return y


def check(nd: int, k: int, s: int, p: int, op: int, d: int, g: int, size: int, bias: bool) -> None:
    gen = torch.Generator().manual_seed(hash((nd, k, s, p, op, d, g, size, bias)) % 2**31)
    c_in, c_out = 2 * g, 3 * g if g > 1 else 3
    x = torch.randn(2, c_in, *([size] * nd), dtype=torch.float64, generator=gen)
    weight = torch.randn(c_in, c_out // g, *([k] * nd), dtype=torch.float64, generator=gen)
    b = torch.randn(c_out, dtype=torch.float64, generator=gen) if bias else None
    kw: dict[str, Any] = {
        "stride": (s,) * nd,
        "padding": (p,) * nd,
        "output_padding": (op,) * nd,
        "dilation": (d,) * nd,
        "groups": g,
    }
    expected = _TRANSPOSED[nd](x, weight, b, **kw)
    got = assemble(x, weight, b, **kw)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


def valid(k: int, s: int, p: int, op: int, d: int, size: int) -> bool:
    out = (size - 1) * s - 2 * p + d * (k - 1) + op + 1
    return op < max(s, d) and out > 0


# every k in 1..5, stride 1..3, padding 0..k-1, output_padding < stride (or < dilation), dilation 1..2
_GRID = [
    (k, s, p, op, d)
    for k, s, d in itertools.product(range(1, 6), range(1, 4), range(1, 3))
    for p in range(k)
    for op in range(max(s, d))
]


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("size", [1, 5])
def test_phases_equal_conv_transpose1d_on_every_combination(groups: int, size: int) -> None:
    checked = 0
    for k, s, p, op, d in _GRID:
        if valid(k, s, p, op, d, size):
            check(1, k, s, p, op, d, groups, size, bias=(k + p) % 2 == 0)
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("groups", [1, 2])
def test_phases_equal_conv_transpose2d_on_every_combination(groups: int) -> None:
    checked = 0
    for k, s, p, op, d in _GRID:
        if valid(k, s, p, op, d, 4):
            check(2, k, s, p, op, d, groups, 4, bias=(k + s) % 2 == 1)
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("groups", [1, 2])
def test_phases_equal_conv_transpose3d_on_every_combination(groups: int) -> None:
    for k, s, p, op, d in _GRID:
        if valid(k, s, p, op, d, 3):
            check(3, k, s, p, op, d, groups, 3, bias=True)


@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "output_padding", "dilation", "groups", "size"),
    [
        ((3, 5, 7), (2, 2, 2), (1, 2, 3), (1, 1, 1), (1, 1, 1), 4, (3, 4, 5)),  # level1/72's mix, small
        ((3, 5, 5), (1, 1, 1), (0, 0, 0), (0, 0, 0), (1, 1, 1), 1, (4, 3, 5)),  # level1/68's kernel
        ((2, 3), (3, 1), (1, 2), (2, 0), (2, 1), 1, (5, 4)),  # per-dim different strides / dilations
        ((4,), (2,), (3,), (1,), (2,), 2, (6,)),
        ((1, 1), (3, 2), (0, 0), (2, 1), (1, 1), 1, (3, 3)),  # phases with no tap: bias only
    ],
)
def test_phases_with_different_parameters_per_dim(
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    output_padding: tuple[int, ...],
    dilation: tuple[int, ...],
    groups: int,
    size: tuple[int, ...],
) -> None:
    gen = torch.Generator().manual_seed(7)
    nd = len(kernel)
    x = torch.randn(2, 2 * groups, *size, dtype=torch.float64, generator=gen)
    weight = torch.randn(2 * groups, 3, *kernel, dtype=torch.float64, generator=gen)
    b = torch.randn(3 * groups, dtype=torch.float64, generator=gen)
    kw: dict[str, Any] = {
        "stride": stride,
        "padding": padding,
        "output_padding": output_padding,
        "dilation": dilation,
        "groups": groups,
    }
    expected = _TRANSPOSED[nd](x, weight, b, **kw)
    torch.testing.assert_close(assemble(x, weight, b, **kw), expected, rtol=1e-10, atol=1e-10)


def test_the_weight_is_read_on_every_call() -> None:
    x = torch.randn(1, 2, 4, dtype=torch.float64)
    weight = torch.randn(2, 3, 3, dtype=torch.float64)
    kw: dict[str, Any] = {
        "stride": (2,),
        "padding": (1,),
        "output_padding": (1,),
        "dilation": (1,),
        "groups": 1,
    }
    before = assemble(x, weight, None, **kw)
    weight.mul_(2.0)
    torch.testing.assert_close(assemble(x, weight, None, **kw), 2.0 * before)
