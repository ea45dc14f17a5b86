"""The 2D-grid pooling kernel (rows x W blocks) on its edge cases, under TRITON_INTERPRET=1 vs PyTorch.

The kernel (htam_graph/rules/recipes/pooling/codegen.py) splits each output row into (plane, od, oh) once per
program and walks BLOCK_W consecutive outputs along W; several rows share a program when a row is shorter
than BLOCK. These tests pin what that layout must still get right: rows shorter and longer than BLOCK (masked
W tails, several W blocks, several rows per program), ceil_mode's last partial window, padding at both ends of
W and of D/H (whole window rows skipped), 3D windows with count_include_pad=False / divisor_override, NaN and
-inf in max pooling (PyTorch propagates NaN), broadcast operands read once per row and per element, the
grid axis-1 slicing of very long rows and the 64-bit row-base path (both forced through the generated
module's own constants, which is what the launcher reads). Tolerance: allclose(rtol=1e-4, atol=1e-4).
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from htam_graph.kernels_runtime.worker.taskmod import load_task_module
from htam_graph.model import Task
from htam_graph.rules import KernelConfig, RulesGenerator
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

import_candidate = runpy.run_path(str(Path(__file__).with_name("candidate_import.py")))["import_candidate"]

KEY = "data_reuse.pooling_window_reuse"


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def pool_task(
    pool: str, init_args: str, shape: str, init: str, forward: str = "self.pool(x)", extra: str = ""
) -> str:
    """A synthetic task: `self.pool = nn.<pool>` plus optional parameters, forward `forward`; the shape and
    init inputs it is generated from (the file reads every window parameter at run time)."""
    return f"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__({init_args}):
        super().__init__()
        self.pool = nn.{pool}
{extra}
    def forward(self, x):
        return {forward}


def get_inputs():
    return [torch.randn({shape})]


def get_init_inputs():
    return [{init}]
"""


def emit(source: str, block: int) -> str:
    task = Task(key="synthetic/pool", suite="kernelbench", level=None, name="pool", source=source,
                source_sha256="0" * 64)  # fmt: skip
    assert RulesGenerator().applies(KEY, task)
    return default_recipes()[KEY].emit(task_view(task), KernelConfig(block=block, num_warps=1))


def compare(
    task_source: str, module: ModuleType, init: list[Any], x: torch.Tensor, *, nan: bool = False
) -> torch.Tensor:
    """Model vs ModelNew (same seed) on `x`; returns the reference output."""
    ref_mod = load_task_module(task_source, "reference", {})
    torch.manual_seed(0)
    model = ref_mod.Model(*init)
    torch.manual_seed(0)
    model_new = module.ModelNew(*init)
    expected = model(x.clone())
    got = model_new(x.clone())
    assert got.shape == expected.shape and got.dtype == expected.dtype
    if not nan:
        assert not expected.isnan().any()
    err = (got - expected).abs().nan_to_num().max().item()
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4, equal_nan=nan), f"max abs error {err}"
    return expected


AVG1D = pool_task(
    "AvgPool1d(kernel_size, stride, padding, ceil_mode, count_include_pad)",
    "self, kernel_size, stride, padding, ceil_mode, count_include_pad",
    "2, 3, 23",
    "4, 3, 2, True, True",
)


@pytest.mark.parametrize("block", [16, 64], ids=["rows_longer_than_block", "several_rows_per_program"])
def test_avg1d_ceil_mode_and_padding_at_both_ends(block: int, tmp_path: Path) -> None:
    module = import_candidate(emit(AVG1D, block), tmp_path)
    x = torch.randn(2, 3, 23 if block == 64 else 45)
    for init in (
        [4, 3, 2, True, True],  # ceil_mode: the last window starts in the input and is clipped at IW + PW
        [4, 3, 2, True, False],  # ... divided by the in-input count only
        [5, 1, 2, False, True],  # stride 1, padding 2 at both ends: the first and last windows are partial
        [5, 1, 2, False, False],
        [3, 4, 0, True, False],  # ceil_mode without padding: the last window runs past the input
    ):
        expected = compare(AVG1D, module, init, x)
        # OW < BLOCK: several rows per program; OW > BLOCK (stride 1): several W blocks per row
        assert expected.shape[-1] < block if block == 64 else init[1] > 1 or expected.shape[-1] > block


def test_avg1d_output_row_of_exactly_one_block_and_one_more(tmp_path: Path) -> None:
    module = import_candidate(emit(AVG1D, 16), tmp_path)
    for length in (16, 17, 31):  # OW = 16 (no tail), 17 (a one-element W block), 31
        compare(AVG1D, module, [1, 1, 0, False, True], torch.randn(1, 2, length))


AVG3D = pool_task(
    "AvgPool3d(kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)",
    "self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override",
    "2, 2, 5, 6, 7",
    "3, 2, 1, True, False, None",
)


@pytest.mark.parametrize("block", [16, 64])
def test_avg3d_windows_skip_padded_rows(block: int, tmp_path: Path) -> None:
    module = import_candidate(emit(AVG3D, block), tmp_path)
    x = torch.randn(1, 2, 5, 6, 37)  # OW 19-20: two W blocks at BLOCK 16, two rows per program at 64
    for init in (
        [3, 2, 1, True, False, None],  # padded D/H rows leave the divisor; ceil_mode's last windows
        [3, 2, 1, False, True, None],  # padded rows counted in the divisor
        [(2, 3, 2), (1, 2, 3), (1, 1, 1), True, True, 7],  # divisor_override, tuple windows
    ):
        compare(AVG3D, module, init, x)


MAX2D = pool_task(
    "MaxPool2d(kernel_size, stride, padding, dilation, ceil_mode=ceil_mode)",
    "self, kernel_size, stride, padding, dilation, ceil_mode",
    "2, 3, 9, 11",
    "3, 2, 1, 2, True",
)


@pytest.mark.parametrize("block", [16, 64])
def test_max2d_dilation_padding_ceil_mode(block: int, tmp_path: Path) -> None:
    module = import_candidate(emit(MAX2D, block), tmp_path)
    x = torch.randn(1, 2, 9, 37) * 4 - 2
    for init in ([3, 2, 1, 2, True], [4, 1, 1, 1, False], [(2, 3), (2, 1), (1, 1), (1, 2), True]):
        compare(MAX2D, module, init, x)


def test_max_pool_propagates_nan_and_keeps_minus_inf(tmp_path: Path) -> None:
    module = import_candidate(emit(MAX2D, 16), tmp_path)
    x = torch.randn(1, 2, 8, 9)
    x[0, 0, 2, 3] = float("nan")  # a NaN wins every window that holds it, even against larger values
    x[0, 0, 2, 4] = 100.0
    x[0, 1, :3, :] = float("-inf")  # windows of -inf only (and padding) give -inf, not a padding value
    expected = compare(MAX2D, module, [3, 1, 1, 1, False], x, nan=True)
    assert expected.isnan().any() and (expected == float("-inf")).any()


BROADCAST = pool_task(
    "AvgPool2d(kernel_size, stride, padding)",
    "self, kernel_size, stride, padding, width, out_width",
    "2, 3, 7, 10",
    "3, 2, 1, 10, 5",
    forward="(self.pool(x * self.row_scale + self.col_shift) + self.out_col) * self.out_chan",
    extra="""        self.row_scale = nn.Parameter(torch.randn(3, 1, 1))  # per input row (per channel)
        self.col_shift = nn.Parameter(torch.randn(width))  # varies along W: per element
        self.out_col = nn.Parameter(torch.randn(out_width))  # epilogue, per element
        self.out_chan = nn.Parameter(torch.randn(3, 1, 1))  # epilogue, per output row
""",
)


@pytest.mark.parametrize("block", [16, 64])
def test_broadcast_operands_per_row_and_per_element(block: int, tmp_path: Path) -> None:
    source = emit(BROADCAST, block)
    for arg in ("row_scale", "col_shift", "out_col", "out_chan"):
        assert f"{arg}_PER_ROW: tl.constexpr" in source, arg
    module = import_candidate(source, tmp_path)
    # width 37, kernel 3, stride 2, padding 1: OW = 19
    compare(BROADCAST, module, [3, 2, 1, 37, 19], torch.randn(2, 3, 7, 37))


MAX1D = pool_task(
    "MaxPool1d(kernel_size, stride, padding)", "self, kernel_size, stride, padding", "2, 2, 19", "3, 1, 1"
)


def test_long_rows_are_launched_in_grid_axis1_slices(tmp_path: Path) -> None:
    module = import_candidate(emit(MAX1D, 16), tmp_path)
    assert module.MAX_GRID_AXIS1 == 65535  # CUDA's real limit in the generated file
    module.MAX_GRID_AXIS1 = 3  # OW = 50: 4 W blocks per row, launched as 3 + 1
    compare(MAX1D, module, [3, 1, 1], torch.randn(2, 2, 50))


def test_64bit_row_bases(tmp_path: Path) -> None:
    module = import_candidate(emit(AVG3D, 16), tmp_path)
    module.INT32_MAX = 0  # every launch takes the INDEX_64 path
    compare(AVG3D, module, [3, 2, 1, True, False, None], torch.randn(2, 2, 5, 6, 7))


def test_no_per_element_division_by_runtime_sizes() -> None:
    source = emit(AVG3D, 1024)
    kernel = source[source.index("@triton.jit") : source.index("def as_window")]
    divisions = [line.strip() for line in kernel.splitlines() if re.search(r"(//|%)\s*[A-Za-z_]", line)]
    # only the per-program split of the row index; no `offs % OW`-style element decomposition
    assert divisions == ["oh = row % OH", "rest = row // OH", "od = rest % OD", "plane = rest // OD"]
    for name in ("KD", "SD", "PD", "SW", "PW", "COUNT_INCLUDE_PAD", "DIVISOR_OVERRIDE", "ROWS", "BLOCK_W"):
        assert f"{name}: tl.constexpr" in kernel, name
    assert "tl.program_id(1)" in kernel and "tl.program_id(0)" in kernel
