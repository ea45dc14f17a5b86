"""The short-row norm kernel (recipes/reduce/rows.py) under TRITON_INTERPRET=1, against torch's own norms.

Small synthetic tasks whose rows are short and whose row count is NOT a multiple of the kernel's BLOCK_ROWS (the
last program's tile is partly masked), random affine parameters (the defaults, ones and zeros, would hide a
wrong broadcast), and broadcast operands of each index mode: per column (layer norm affine), per row (a weight
constant along each row), per channel (group norm affine, a per-feature weight after a GEMM) and per element
(the flat-index fallback). Each check records which kernel the launcher ran and with which operand modes, so a
test fails if the short-row path is silently not taken. The reference is torch.nn.functional.layer_norm /
group_norm in float64 on the same fp32 data; allclose(rtol=1e-4, atol=1e-4).
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import torch

from htam_graph.kernels_runtime.worker.taskmod import load_task_module
from htam_graph.model import Task
from htam_graph.rules import KernelConfig
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes
from htam_graph.rules.recipes.reduce.rows import uses_rows_kernel

INTERP_CHILD = Path(__file__).with_name("interp_child.py")
import_candidate = runpy.run_path(str(Path(__file__).with_name("candidate_import.py")))["import_candidate"]
NORM = "reduction_structure.single_pass_norm"

LAYER_NORM = """
import pytest
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, width, middle):
        super().__init__()
        self.ln = nn.LayerNorm(width, eps=1e-5)
        self.scale = nn.Parameter(torch.randn(middle, 1))
        self.shift = nn.Parameter(torch.randn(middle, width))

    def forward(self, x):
        x = self.ln(x)
        x = torch.nn.functional.gelu(x)
        return x * self.scale + self.shift


def get_inputs():
    return [torch.randn(5, 7, 24) * 3 + 10]


def get_init_inputs():
    return [24, 7]
"""

GROUP_NORM_2D = """
import pytest
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features, groups):
        super().__init__()
        self.fc = nn.Linear(16, features)
        self.gn = nn.GroupNorm(groups, features)
        self.weight = nn.Parameter(torch.randn(features))

    def forward(self, x):
        x = self.fc(x)
        x = self.gn(x)
        x = x * torch.sigmoid(x)
        return x * self.weight


def get_inputs():
    return [torch.randn(11, 16) * 4 + 3]


def get_init_inputs():
    return [24, 4]
"""

GROUP_NORM_3D = """
import pytest
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, groups, batch):
        super().__init__()
        self.gn = nn.GroupNorm(groups, channels)
        self.per_sample = nn.Parameter(torch.randn(batch, 1, 1))
        self.per_position = nn.Parameter(torch.randn(channels, 3))

    def forward(self, x):
        return torch.relu(self.gn(x)) * self.per_position + self.per_sample


def get_inputs():
    return [torch.randn(5, 12, 3) * 2 - 7]


def get_init_inputs():
    return [12, 4, 5]
"""


def _task(source: str) -> Task:
    return Task(
        key="synthetic/rows", suite="x", level=None, name="rows", source=source, source_sha256="0" * 64
    )


def _emit(source: str, block: int) -> str:
    recipe = default_recipes()[NORM]
    return recipe.emit(task_view(_task(source)), KernelConfig(block=block, num_warps=2))  # type: ignore[arg-type]


class _Recorder:
    """Stands in for a @triton.jit kernel in the candidate module: records each launch, then launches it."""

    def __init__(self, kernel: Any, launches: list[dict[str, Any]], name: str) -> None:
        self.kernel, self.launches, self.name = kernel, launches, name

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **kwargs: Any) -> Any:
            self.launches.append({"kernel": self.name, "grid": list(grid), **kwargs})
            return self.kernel[grid](*args, **kwargs)

        return launch


def _reference(model: torch.nn.Module, x: torch.Tensor, kind: str) -> torch.Tensor:
    """The task's forward in float64 with torch's norm functions (exact for these fp32 inputs)."""
    f = torch.nn.functional
    m = model.double()
    xd = x.double()
    if kind == "layer":
        y = f.gelu(f.layer_norm(xd, m.ln.normalized_shape, m.ln.weight, m.ln.bias, m.ln.eps))
        return (y * m.scale + m.shift).float()
    if kind == "group2d":
        y = f.group_norm(
            f.linear(xd, m.fc.weight, m.fc.bias), m.gn.num_groups, m.gn.weight, m.gn.bias, m.gn.eps
        )
        return (y * torch.sigmoid(y) * m.weight).float()
    y = f.group_norm(xd, m.gn.num_groups, m.gn.weight, m.gn.bias, m.gn.eps)
    return (torch.relu(y) * m.per_position + m.per_sample).float()


def check_rows_kernel(task_source: str, candidate: str, kind: str, directory: Path) -> dict[str, Any]:
    """Run the candidate on the task's input with random affine parameters; returns the launches and the error."""
    ref_mod = load_task_module(task_source, "reference", {})
    init = list(ref_mod.get_init_inputs())
    torch.manual_seed(0)
    model = ref_mod.Model(*init)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln." in name or "gn." in name:
                p.uniform_(-2, 2)
    cand = import_candidate(candidate, directory)
    launches: list[dict[str, Any]] = []
    for name in dir(cand):
        if name.endswith("_kernel") and hasattr(getattr(cand, name), "__getitem__"):
            setattr(cand, name, _Recorder(getattr(cand, name), launches, name))
    model_new = cand.ModelNew(*init)
    model_new.load_state_dict(model.state_dict())
    torch.manual_seed(1)
    x = ref_mod.get_inputs()[0]
    with torch.no_grad():
        got = model_new(x)
        expected = _reference(model, x, kind)
    assert got.shape == expected.shape and got.dtype == torch.float32
    err = (got - expected).abs().max().item()
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"max abs error {err}"
    return {"launches": launches, "err": err}


def _run(source: str, kind: str, block: int, tmp_path: Path) -> dict[str, Any]:
    """check_rows_kernel in a fresh process with TRITON_INTERPRET=1 (tl.reduce / tl.sum need it set first)."""
    run_isolated = runpy.run_path(str(INTERP_CHILD))["run_isolated"]
    kwargs = {"task_source": source, "candidate": _emit(source, block), "kind": kind, "directory": tmp_path}
    result: dict[str, Any] = run_isolated(
        __file__, "check_rows_kernel", kwargs, runtime_warnings_are_errors=True
    )
    return result


def _rows_launch(result: dict[str, Any]) -> dict[str, Any]:
    launches = result["launches"]
    assert [launch["kernel"].endswith("_rows_kernel") for launch in launches] == [True], launches
    return launches[0]


def test_layer_norm_rows_with_a_partial_last_tile(tmp_path: Path) -> None:
    # 35 rows of 24 -> BLOCK_N 32; BLOCK=128 -> 4 rows per program, 9 programs, the last holds 3 rows
    launch = _rows_launch(_run(LAYER_NORM, "layer", 128, tmp_path))
    assert (launch["BLOCK_N"], launch["BLOCK_ROWS"], launch["grid"]) == (32, 4, [9])
    assert launch["LN_WEIGHT_MODE"] == launch["LN_BIAS_MODE"] == 1  # per column: [1, BLOCK_N] loads
    assert launch["SCALE_MODE"] == 3  # (7, 1) on (5, 7, 24): constant along each row
    # (7, 24): neither per column nor per row, the flat-index fallback (`shift`, a template local, is renamed)
    assert launch["T_SHIFT_MODE"] == 0


def test_group_norm_after_a_gemm_rows_with_a_partial_last_tile(tmp_path: Path) -> None:
    # 11 samples x 4 groups = 44 rows of 6 -> BLOCK_N 8; BLOCK=64 -> 8 rows per program, 6 programs
    launch = _rows_launch(_run(GROUP_NORM_2D, "group2d", 64, tmp_path))
    assert (launch["BLOCK_N"], launch["BLOCK_ROWS"], launch["grid"]) == (8, 8, [6])
    assert launch["GN_WEIGHT_MODE"] == launch["GN_BIAS_MODE"] == launch["WEIGHT_MODE"] == 2  # per channel


def test_group_norm_with_spatial_dims_rows_with_a_partial_last_tile(tmp_path: Path) -> None:
    # (5, 12, 3), 4 groups: 20 rows of 3 channels x 3 = 9 -> BLOCK_N 16; BLOCK=128 -> 8 rows, 3 programs
    launch = _rows_launch(_run(GROUP_NORM_3D, "group3d", 128, tmp_path))
    assert (launch["BLOCK_N"], launch["BLOCK_ROWS"], launch["grid"]) == (16, 8, [3])
    assert launch["GN_WEIGHT_MODE"] == launch["GN_BIAS_MODE"] == 2
    assert launch["PER_SAMPLE_MODE"] == 3  # (5, 1, 1): constant along each (sample, group) row
    assert launch["PER_POSITION_MODE"] == 0  # (12, 3): per element of a sample, the flat-index fallback


def test_long_rows_keep_the_tiled_kernel(tmp_path: Path) -> None:
    # BLOCK=16 < 24: a row does not fit one tile, so the looping kernel of recipes/reduce/kernel.py runs instead
    launches = _run(LAYER_NORM, "layer", 16, tmp_path)["launches"]
    assert [launch["kernel"].endswith("_rows_kernel") for launch in launches] == [False], launches


def test_only_norm_modules_get_the_rows_kernel() -> None:
    from htam_graph.rules.recipes.reduce.plan import plan_reduction

    norm = plan_reduction(task_view(_task(LAYER_NORM)).graph)
    assert uses_rows_kernel(norm)
    rms = LAYER_NORM.replace(
        "x = self.ln(x)", "x = x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-5)"
    )
    assert not uses_rows_kernel(plan_reduction(task_view(_task(rms)).graph))
    source = _emit(rms, 2048)
    assert "_rows_kernel" not in source and "SHORT_ROW_MAX" not in source


KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"


def test_library_bias_moves_into_the_norm_kernel() -> None:
    """GEMM / conv -> norm: the library call runs without its bias and the fused kernel adds it (what the
    interpreter checks above verify numerically for GROUP_NORM_2D)."""
    source = _emit(GROUP_NORM_2D, 2048)
    assert "y = torch.nn.functional.linear(x, self.fc.weight)  # library op without its bias" in source
    assert "self.fc.bias, " in source and "v_fc = fc_nobias + fc_bias" in source
    rel = "level2/34_ConvTranspose3d_LayerNorm_GELU_Scaling.py"
    task = Task(
        key=f"kernelbench/{rel[:-3]}",
        suite="kernelbench",
        level=None,
        name=rel,
        source=(KB / rel).read_text(encoding="utf-8"),
        source_sha256="0" * 64,
    )
    recipe = default_recipes()[NORM]
    source = recipe.emit(task_view(task), recipe.default_config)  # type: ignore[arg-type]
    assert "conv_transpose3d(x, self.conv_transpose.weight, None, " in source
    assert "self.conv_transpose.bias.view(-1, 1, 1, 1)" in source
    assert "layer_norm_gelu_mul_rows_kernel[" in source
