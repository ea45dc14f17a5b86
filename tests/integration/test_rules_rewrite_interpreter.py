"""algebraic_rewrite.* kernels run under TRITON_INTERPRET=1 on the CPU and match the reference Model.

The diagonal-matmul rewrite is checked on the dev-split task (level1/12, `A.unsqueeze(1) * B`) and on the
literal forms it claims to rewrite (`torch.diag(a) @ B`, `B @ torch.diag(a)`, `a.unsqueeze(0) * B`, a
parameter vector), with the same seeds and allclose(rtol=1e-4, atol=1e-4) on signed inputs.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest
import torch

from htam_graph.kernels_runtime.static_checks import analyse as static_analyse
from htam_graph.kernels_runtime.worker.taskmod import load_task_module
from htam_graph.model import PrecisionPolicy, Task
from htam_graph.rules import KernelConfig, RulesGenerator, parse_header
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

import_candidate = runpy.run_path(str(Path(__file__).with_name("candidate_import.py")))["import_candidate"]

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
DIAG = "algebraic_rewrite.diag_matmul_as_broadcast"


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def make_task(key: str, source: str) -> Task:
    return Task(key=key, suite="kernelbench", level=None, name=key, source=source, source_sha256="0" * 64)


def check_against_reference(
    task_source: str, candidate_source: str, directory: Path, overrides: dict[str, Any]
) -> float:
    ref_mod = load_task_module(task_source, "reference", overrides)
    cand = import_candidate(candidate_source, directory)
    init = list(ref_mod.get_init_inputs())
    torch.manual_seed(0)
    model = ref_mod.Model(*init)
    torch.manual_seed(0)
    model_new = cand.ModelNew(*init)
    ref_state, new_state = model.state_dict(), model_new.state_dict()
    assert list(ref_state) == list(new_state)
    assert all(torch.equal(ref_state[k], new_state[k]) for k in ref_state)
    torch.manual_seed(1)
    own = list(ref_mod.get_inputs())
    worst = 0.0
    for inputs in (own, [x * 6 - 3 if x.is_floating_point() else x for x in own]):
        expected = model(*[x.clone() for x in inputs])
        kept = [x.clone() for x in inputs]
        got = model_new(*inputs)
        assert all(torch.equal(a, b) for a, b in zip(inputs, kept, strict=True)), (
            "ModelNew changed its inputs"
        )
        assert type(got) is torch.Tensor and got.shape == expected.shape and got.dtype == expected.dtype
        assert expected.float().std() > 0
        err = (got - expected).abs().max().item()
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"max abs error {err}"
        worst = max(worst, err)
    return worst


def test_diag_rewrite_on_the_dev_task(tmp_path: Path) -> None:
    source = (KB / "level1/12_Matmul_with_diagonal_matrices_.py").read_text(encoding="utf-8")
    task = make_task("kernelbench/level1/12_Matmul_with_diagonal_matrices_", source)
    generator = RulesGenerator()
    assert DIAG in generator.recipes_for(task)
    candidate = default_recipes()[DIAG].emit(task_view(task), KernelConfig(block=16, num_warps=1))
    header = parse_header(candidate)
    assert header is not None and header.recipe == DIAG
    report = static_analyse(candidate, PrecisionPolicy.FP32_STRICT, require_kernel=True)
    assert report.violations == [] and report.has_triton_kernel
    assert "scale_rows=True" in candidate
    check_against_reference(source, candidate, tmp_path, {"M": 37, "N": 23})


FORMS = {
    "diag_at_B": ("torch.diag(A) @ B", "N", "torch.rand(N, M)", True),
    "B_at_diag": ("torch.matmul(B, torch.diag(A))", "M", "torch.rand(N, M)", False),
    "unsqueeze0": ("A.unsqueeze(0) * B", "M", "torch.rand(N, M)", False),
    "B_times_unsqueeze": ("B * torch.unsqueeze(A, -1)", "N", "torch.rand(N, M)", True),
}


def form_source(expr: str, length: str, matrix: str) -> str:
    return f"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return {expr}


M = 19
N = 11


def get_inputs():
    return [torch.rand({length}), {matrix}]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("form", list(FORMS))
def test_diag_rewrite_forms(form: str, tmp_path: Path) -> None:
    expr, length, matrix, rows = FORMS[form]
    source = form_source(expr, length, matrix)
    task = make_task(f"synthetic/{form}", source)
    candidate = default_recipes()[DIAG].emit(task_view(task), KernelConfig(block=16, num_warps=1))
    assert f"scale_rows={rows}" in candidate
    check_against_reference(source, candidate, tmp_path, {})
    check_against_reference(source, candidate, tmp_path, {"M": 40, "N": 3})  # other sizes, same file


PARAM_VECTOR = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(n))

    def forward(self, B):
        return torch.diag(self.scale) @ B


N = 9
M = 21


def get_inputs():
    return [torch.randn(N, M)]


def get_init_inputs():
    return [N]
"""


def test_diag_rewrite_with_a_parameter_vector(tmp_path: Path) -> None:
    task = make_task("synthetic/param_diag", PARAM_VECTOR)
    candidate = default_recipes()[DIAG].emit(task_view(task), KernelConfig(block=16, num_warps=1))
    assert "diag_scale(self.scale, B, scale_rows=True)" in candidate
    check_against_reference(PARAM_VECTOR, candidate, tmp_path, {})


# ------------------------------------------------------------------------------------------- drop_noops
NOOPS = "algebraic_rewrite.drop_noops"


@pytest.mark.parametrize(
    ("rel", "overrides"),
    [
        ("level2/40_Matmul_Scaling_ResidualAdd.py", {"batch_size": 3, "in_features": 29, "out_features": 37}),
        (
            "level2/20_ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd.py",
            {"batch_size": 2, "in_channels": 3, "out_channels": 4, "depth": 3, "height": 5, "width": 6},
        ),
    ],
    ids=["40_Matmul_Scaling_ResidualAdd", "20_ConvTranspose3d_Sum_ResidualAdd"],
)
def test_drop_noops_then_fuse_matches_reference(rel: str, overrides: dict[str, int], tmp_path: Path) -> None:
    source = (KB / rel).read_text(encoding="utf-8")
    task = make_task(f"kernelbench/{rel[:-3]}", source)
    for config in (default_recipes()[NOOPS].default_config, KernelConfig(block=64, num_warps=2)):
        candidate = default_recipes()[NOOPS].emit(task_view(task), config)
        header = parse_header(candidate)
        assert header is not None and header.recipe == NOOPS and header.config == config
        assert "Dropped value-preserving copies (clone" in candidate
        assert ".clone()" not in candidate and ".detach()" not in candidate
        report = static_analyse(candidate, PrecisionPolicy.FP32_STRICT, require_kernel=True)
        assert report.violations == [] and report.has_triton_kernel
        check_against_reference(source, candidate, tmp_path, overrides)
