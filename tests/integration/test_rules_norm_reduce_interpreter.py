"""Norm / reduction / softmax-over-dim rule kernels run under TRITON_INTERPRET=1 on the CPU and match Model.

For each dev-split task a recipe applies to: generate, then run ModelNew against Model at small sizes (module
constants overridden per task so that group counts divide channels and layer norm shapes still fit), same seed
for both constructors, on four input sets: the task's own inputs, a signed copy (x * 6 - 3), a signed copy
with a large mean (x * 6 - 3 + 10, exposes E[x^2] - E[x]^2 cancellation) and rounded values (many exact ties:
argmin/argmax must pick the first index like PyTorch). allclose(rtol=1e-4, atol=1e-4); exact for indices.

Each file is run twice: with the default config and with BLOCK=16, which forces several tiles per row, masked
tails and (for long rows with few programs) the split reduction whose partial states are merged in a second
kernel. The kernels use tl.reduce, so every check runs in a fresh child process with TRITON_INTERPRET=1 set
before triton is imported.
"""

from __future__ import annotations

import re
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

INTERP_CHILD = Path(__file__).with_name("interp_child.py")  # the shared child-process runner
import_candidate = runpy.run_path(str(Path(__file__).with_name("candidate_import.py")))["import_candidate"]
KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
NORM = "reduction_structure.single_pass_norm"
DIM = "reduction_structure.dim_reduction"
LSE = "reduction_structure.online_logsumexp"

_GEMM_GN = {"batch_size": 3, "in_features": 20, "out_features": 48, "num_groups": 4}
_IMG = {"batch_size": 2, "features": 5, "dim1": 9, "dim2": 11}
# (task, recipe, small sizes)
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("level1/34_InstanceNorm.py", NORM, _IMG),
    ("level1/36_RMSNorm_.py", NORM, _IMG),
    ("level1/38_L1Norm_.py", NORM, {"batch_size": 3, "dim": 1000}),
    ("level1/40_LayerNorm.py", NORM, _IMG),
    ("level2/30_Gemm_GroupNorm_Hardtanh.py", NORM, _GEMM_GN),
    (
        "level2/34_ConvTranspose3d_LayerNorm_GELU_Scaling.py",
        NORM,
        {"batch_size": 2, "in_channels": 3, "out_channels": 8, "D": 3, "H": 5, "W": 4},
    ),
    (
        "level2/60_ConvTranspose3d_Swish_GroupNorm_HardSwish.py",
        NORM,
        {"batch_size": 2, "in_channels": 3, "out_channels": 8, "depth": 3, "height": 5, "width": 4},
    ),
    (
        "level2/62_Matmul_GroupNorm_LeakyReLU_Sum.py",
        NORM,
        {"batch_size": 3, "input_size": 20, "hidden_size": 48, "num_groups": 4},
    ),
    ("level2/88_Gemm_GroupNorm_Swish_Multiply_Swish.py", NORM, _GEMM_GN),
    ("level2/94_Gemm_BiasAdd_Hardtanh_Mish_GroupNorm.py", NORM, _GEMM_GN),
    ("level1/48_Mean_reduction_over_a_dimension.py", DIM, {"batch_size": 2, "dim1": 9, "dim2": 11}),
    ("level1/52_Argmin_over_a_dimension.py", DIM, {"batch_size": 2, "dim1": 9, "dim2": 11}),
    ("level2/56_Matmul_Sigmoid_Sum.py", DIM, {"batch_size": 3, "input_size": 20, "hidden_size": 1000}),
    (
        "level2/32_Conv2d_Scaling_Min.py",
        DIM,
        {"batch_size": 2, "in_channels": 3, "out_channels": 8, "height": 9, "width": 7},
    ),
    ("level1/24_LogSoftmax.py", LSE, {"batch_size": 2, "dim": 1000}),
    (
        "level2/22_Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish.py",
        LSE,
        {"batch_size": 3, "input_size": 20, "hidden_size": 300},
    ),
    (
        "level2/58_ConvTranspose3d_LogSumExp_HardSwish_Subtract_Clamp.py",
        LSE,
        {"batch_size": 2, "in_channels": 3, "out_channels": 5, "depth": 3, "height": 4, "width": 5},
    ),
    (
        "level2/64_Gemm_LogSumExp_LeakyReLU_LeakyReLU_GELU_GELU.py",
        LSE,
        {"batch_size": 3, "in_features": 20, "out_features": 300},
    ),
    (  # avg_pool -> conv_transpose (PyTorch), then clamp -> softmax over the flattened d*h*w -> * scale
        "level2/38_ConvTranspose3d_AvgPool_Clamp_Softmax_Multiply.py",
        LSE,
        {"batch_size": 2, "in_channels": 3, "out_channels": 5, "depth": 4, "height": 6, "width": 6},
    ),
]


def make_task(rel: str) -> Task:
    source = (KB / rel).read_text(encoding="utf-8")
    return Task(
        key=f"kernelbench/{rel[:-3]}",
        suite="kernelbench",
        level=None,
        name=rel,
        source=source,
        source_sha256="0" * 64,
    )


def input_sets(own: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    def each(f: Any) -> list[torch.Tensor]:
        return [f(x) if x.is_floating_point() else x for x in own]

    return [
        own,
        each(lambda x: x * 6 - 3),
        each(lambda x: x * 6 - 3 + 10),
        each(lambda x: torch.round(x * 6 - 3)),
    ]


def check_against_reference(
    task_source: str, candidates: list[str], directory: Path, overrides: dict[str, Any]
) -> float:
    """Every candidate against Model on four input sets; returns the worst max abs error."""
    ref_mod = load_task_module(task_source, "reference", overrides)
    init = list(ref_mod.get_init_inputs())
    torch.manual_seed(0)
    model = ref_mod.Model(*init)
    torch.manual_seed(1)
    own = list(ref_mod.get_inputs())
    worst = 0.0
    for candidate_source in candidates:
        cand = import_candidate(candidate_source, directory)
        torch.manual_seed(0)
        model_new = cand.ModelNew(*init)
        ref_state, new_state = model.state_dict(), model_new.state_dict()
        assert list(ref_state) == list(new_state)
        assert all(torch.equal(ref_state[k], new_state[k]) for k in ref_state)
        for inputs in input_sets(own):
            with torch.no_grad():
                expected = model(*[x.clone() for x in inputs])
                kept = [x.clone() for x in inputs]
                got = model_new(*inputs)
            assert all(torch.equal(a, b) for a, b in zip(inputs, kept, strict=True)), "inputs changed"
            assert type(got) is torch.Tensor and got.shape == expected.shape and got.dtype == expected.dtype
            if not expected.is_floating_point():
                assert torch.equal(got, expected), "indices differ"
                continue
            assert expected.float().std() > 0, "degenerate reference output at this size"
            err = (got - expected).abs().max().item()
            assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"max abs error {err}"
            worst = max(worst, err)
    return worst


def isolated(function: str, **kwargs: Any) -> Any:
    """Call a function of this module in a fresh process with TRITON_INTERPRET=1 set before any import."""
    run_isolated = runpy.run_path(str(INTERP_CHILD))["run_isolated"]
    return run_isolated(__file__, function, kwargs, runtime_warnings_are_errors=True)


def assert_clean_static(source: str) -> None:
    report = static_analyse(source, PrecisionPolicy.FP32_STRICT, require_kernel=True)
    assert report.syntax_error is None
    assert report.defines_model_new and report.has_triton_kernel
    assert report.violations == []


@pytest.mark.parametrize(("rel", "key", "overrides"), CASES, ids=[c[0].split("/")[1][:-3] for c in CASES])
def test_generated_kernel_matches_reference(
    rel: str, key: str, overrides: dict[str, Any], tmp_path: Path
) -> None:
    task = make_task(rel)
    generator = RulesGenerator()
    assert key in generator.recipes_for(task)
    recipe = default_recipes()[key]
    source = recipe.emit(task_view(task), recipe.default_config)  # type: ignore[arg-type]
    header = parse_header(source)
    assert header is not None and header.recipe == key
    assert_clean_static(source)
    small = recipe.emit(task_view(task), KernelConfig(block=16, num_warps=2))  # type: ignore[arg-type]
    # the child asserts allclose (exact for indices) on every input set; a failure fails this test
    isolated(
        "check_against_reference",
        task_source=task.source,
        candidates=[source, small],
        directory=tmp_path,
        overrides=overrides,
    )


def test_coverage_of_the_dev_split() -> None:
    """recipes_for over level1 + level2 gives exactly the tasks listed in CASES for these three recipes."""
    generator = RulesGenerator()
    found: dict[str, set[str]] = {NORM: set(), DIM: set(), LSE: set()}
    for path in sorted([*KB.glob("level1/*.py"), *KB.glob("level2/*.py")]):
        rel = str(path.relative_to(KB))
        for key in generator.recipes_for(make_task(rel)):
            if key in found:
                found[key].add(rel)
    for key, tasks in found.items():
        assert tasks == {rel for rel, k, _ in CASES if k == key}, key


WELFORD_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.ln = nn.LayerNorm(shape, eps=1e-6)

    def forward(self, x):
        return self.ln(x)


batch_size = 2
rows = 3
cols = 700


def get_inputs():
    return [torch.randn(batch_size, rows, cols) * 0.01 + 1000.0]


def get_init_inputs():
    return [(rows, cols)]
"""


def check_split_welford(task_source: str, directory: Path) -> dict[str, float]:
    """Layer norm of rows with mean 1000 and std 0.01, split into many slices: Welford merges must not cancel."""
    task = Task(
        key="synthetic/ln", suite="x", level=None, name="ln", source=task_source, source_sha256="0" * 64
    )
    recipe = default_recipes()[NORM]
    errors = {}
    for target in (1, 4096):  # 1: never split; 4096: rows of 2100 split into ~33 slices of BLOCK=16 tiles
        source = recipe.emit(task_view(task), KernelConfig(block=16, num_warps=2))  # type: ignore[arg-type]
        source = re.sub(r"SPLIT_TARGET_PROGRAMS = \d+", f"SPLIT_TARGET_PROGRAMS = {target}", source)
        assert f"SPLIT_TARGET_PROGRAMS = {target}" in source
        ref_mod = load_task_module(task_source, "reference", {})
        torch.manual_seed(0)
        model = ref_mod.Model(*ref_mod.get_init_inputs())
        torch.manual_seed(0)
        model_new = import_candidate(source, directory).ModelNew(*ref_mod.get_init_inputs())
        with torch.no_grad():
            model.ln.weight.uniform_(-2, 2)
            model.ln.bias.uniform_(-2, 2)
            model_new.load_state_dict(model.state_dict())
            x = ref_mod.get_inputs()[0]
            # the float64 reference of the same fp32 input: what an exact algorithm would return
            expected = torch.nn.functional.layer_norm(
                x.double(), model.ln.normalized_shape, model.ln.weight.double(), model.ln.bias.double(), 1e-6
            ).float()
            got = model_new(x)
        errors[str(target)] = (got - expected).abs().max().item()
    return errors


def test_split_welford_is_stable_for_a_large_mean(tmp_path: Path) -> None:
    errors = isolated("check_split_welford", task_source=WELFORD_TASK, directory=tmp_path)
    # fp32 inputs near 1000 have an ulp of 6e-5, i.e. 0.6% of the 0.01 std: the normalised values carry that
    # representation error whatever the algorithm; E[x^2] - E[x]^2 in fp32 would be off by O(1).
    assert errors["1"] < 0.05 and errors["4096"] < 0.05, errors


SPATIAL_SOFTMAX = "level2/38_ConvTranspose3d_AvgPool_Clamp_Softmax_Multiply.py"


def check_spatial_softmax(
    task_source: str, candidates: list[str], directory: Path, overrides: dict[str, Any]
) -> float:
    """level2/38 with a random per-channel scale (the task's is all ones, which would hide a wrong broadcast)
    and a relative tolerance: its softmax values are ~1/(d*h*w), small enough that atol=1e-4 alone says little.
    Returns the worst relative error."""
    ref_mod = load_task_module(task_source, "reference", overrides)
    init = list(ref_mod.get_init_inputs())
    torch.manual_seed(0)
    model = ref_mod.Model(*init)
    with torch.no_grad():
        model.scale.copy_(torch.randn_like(model.scale))
    torch.manual_seed(1)
    x = ref_mod.get_inputs()[0] * 6 - 3  # conv output on both sides of the clamp range
    with torch.no_grad():
        expected = model(x)
    assert (expected > 0).any() and (expected < 0).any(), "the random scale should take both signs"
    worst = 0.0
    for candidate_source in candidates:
        model_new = import_candidate(candidate_source, directory).ModelNew(*init)
        model_new.load_state_dict(model.state_dict())
        with torch.no_grad():
            got = model_new(x)
        assert got.shape == expected.shape
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-12)
        worst = max(worst, ((got - expected).abs() / expected.abs()).max().item())
    return worst


def test_spatial_softmax_matches_with_a_random_scale_and_a_relative_tolerance(tmp_path: Path) -> None:
    overrides = next(o for rel, _, o in CASES if rel == SPATIAL_SOFTMAX)
    task = make_task(SPATIAL_SOFTMAX)
    recipe = default_recipes()[LSE]
    sources = [
        recipe.emit(task_view(task), recipe.default_config),  # type: ignore[arg-type]
        recipe.emit(task_view(task), KernelConfig(block=16, num_warps=2)),  # type: ignore[arg-type]
    ]
    assert "(2, 3, 4))" in sources[0]  # softmax over the flattened d, h, w of each (sample, channel)
    worst = isolated(
        "check_spatial_softmax",
        task_source=task.source,
        candidates=sources,
        directory=tmp_path,
        overrides=overrides,
    )
    assert worst < 1e-4
