"""data_reuse.pooling_window_reuse kernels run under TRITON_INTERPRET=1 on the CPU and match the reference Model.

Every dev-split task the pooling recipe applies to is generated, then ModelNew (real Triton kernels,
interpreted) is run against Model at small sizes (module constants overridden, window parameters kept), with
the same seed for both constructors and two input sets: the task's own and a signed copy (x * 6 - 3).
Tolerance: allclose(rtol=1e-4, atol=1e-4). Synthetic tasks cover what the dev split does not: ceil_mode,
count_include_pad=False, divisor_override, dilation, padding on a 1D max pool, tuple windows, an epilogue with
a per-channel parameter after the pool, and a file reused at other sizes and window parameters.
"""

from __future__ import annotations

import ast
import re
import runpy
from pathlib import Path
from typing import Any

import pytest
import torch

from htam_graph.kernels_runtime.static_checks import analyse as static_analyse
from htam_graph.kernels_runtime.worker.taskmod import load_task_module, module_constants
from htam_graph.model import (
    GenerationRequest,
    GlobalDirection,
    Language,
    LocalStrategy,
    PrecisionPolicy,
    Task,
)
from htam_graph.rules import KernelConfig, RulesGenerator, parse_header
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

import_candidate = runpy.run_path(str(Path(__file__).with_name("candidate_import.py")))["import_candidate"]

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
KEY = "data_reuse.pooling_window_reuse"
POOL_TASKS = [
    "level1/42_Max_Pooling_2D.py",
    "level1/44_Average_Pooling_1D.py",
    "level1/46_Average_Pooling_3D.py",
    "level2/46_Conv2d_Subtract_Tanh_Subtract_AvgPool.py",
    "level2/50_ConvTranspose3d_Scaling_AvgPool_BiasAdd_Scaling.py",
    "level2/74_ConvTranspose3d_LeakyReLU_Multiply_LeakyReLU_Max.py",
    "level2/82_Conv2d_Tanh_Scaling_BiasAdd_Max.py",
]
WINDOW = ("kernel", "stride", "padding", "dilation", "groups")


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def make_task(key: str, source: str) -> Task:
    return Task(key=key, suite="kernelbench", level=None, name=key, source=source, source_sha256="0" * 64)


def request(task: Task, key: str = KEY) -> GenerationRequest:
    global_key = key.split(".")[0]
    return GenerationRequest(
        task=task,
        step=0,
        direction=GlobalDirection(key=global_key, name=global_key, intent=""),
        strategy=LocalStrategy(
            key=key, name=key, global_key=global_key, languages=[Language.TRITON], pattern=""
        ),
        base_source="",
        language=Language.TRITON,
        state_summary="",
        device="cpu",
    )


def small_overrides(source: str) -> dict[str, Any]:
    """Batch 2, 3-4 channels, spatial sizes 9-13, 37 features; window parameters (kernel/stride/...) kept."""
    out: dict[str, Any] = {}
    for name, value in module_constants(ast.parse(source)).items():
        if not isinstance(value, int) or isinstance(value, bool) or any(w in name for w in WINDOW):
            continue
        if "batch" in name:
            out[name] = 2
        elif "channels" in name:
            out[name] = 3 + len(name) % 2
        elif "features" in name or "size" in name:
            out[name] = 37
        elif value > 13:
            out[name] = 9 + len(name) % 5
    return out


def check_against_reference(
    task_source: str,
    candidate_source: str,
    directory: Path,
    overrides: dict[str, Any],
    init_override: list[Any] | None = None,
) -> float:
    """Run ModelNew against Model; assert identical weights and allclose outputs. Returns the max abs error."""
    ref_mod = load_task_module(task_source, "reference", overrides)
    cand = import_candidate(candidate_source, directory)
    init = init_override if init_override is not None else list(ref_mod.get_init_inputs())
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
        assert expected.float().std() > 0, "degenerate reference output at this size"
        err = (got - expected).abs().max().item()
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"max abs error {err}"
        worst = max(worst, err)
    return worst


def assert_clean_static(source: str) -> None:
    report = static_analyse(source, PrecisionPolicy.FP32_STRICT, require_kernel=True)
    assert report.syntax_error is None
    assert report.defines_model_new and report.has_triton_kernel
    assert report.violations == []


@pytest.mark.parametrize("rel", POOL_TASKS, ids=[t.split("/")[1][:-3] for t in POOL_TASKS])
def test_pool_kernel_matches_reference(rel: str, tmp_path: Path) -> None:
    source = (KB / rel).read_text(encoding="utf-8")
    task = make_task(f"kernelbench/{rel[:-3]}", source)
    reply = RulesGenerator().generate(request(task))
    assert reply.error is None and reply.source is not None
    header = parse_header(reply.source)
    assert header is not None and header.recipe == KEY
    assert_clean_static(reply.source)
    overrides = small_overrides(source)
    check_against_reference(source, reply.source, tmp_path, overrides)
    # A small block: several programs and a masked tail even at these sizes.
    small = default_recipes()[KEY].emit(task_view(task), KernelConfig(block=16, num_warps=1))
    check_against_reference(source, small, tmp_path, overrides)


# ------------------------------------------------------------------------------------------- synthetic tasks
AVG2D = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
        self.bias = nn.Parameter(torch.randn(channels, 1, 1))
        self.scale = 2.0

    def forward(self, x):
        return torch.relu(self.pool(x * self.scale)) + self.bias


batch_size = 2
channels = 3
height = 10
width = 13


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, 3, 2, 1, True, False, None]
"""

MAX3D = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding, dilation, ceil_mode):
        super().__init__()
        self.pool = nn.MaxPool3d(kernel_size, stride, padding, dilation, ceil_mode=ceil_mode)

    def forward(self, x):
        return self.pool(x)


batch_size = 2
channels = 2
depth = 7
height = 9
width = 11


def get_inputs():
    return [torch.randn(batch_size, channels, depth, height, width)]


def get_init_inputs():
    return [(2, 3, 2), (1, 2, 2), (1, 1, 0), (1, 2, 1), True]
"""

MAX1D = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding, dilation):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size, stride, padding, dilation)

    def forward(self, x):
        return self.pool(x)


batch_size = 2
channels = 3
length = 29


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [4, 3, 2, 2]
"""


@pytest.mark.parametrize(
    ("source", "inits"),
    [
        (
            AVG2D,
            [
                [3, 3, 2, 1, True, False, None],  # ceil_mode, padding excluded from the divisor
                [3, 3, 2, 1, True, True, None],  # ceil_mode, padding counted (clipped to the padded input)
                [3, (2, 3), (1, 2), (1, 1), False, True, 5],  # divisor_override, tuple windows
            ],
        ),
        (MAX3D, [[(2, 3, 2), (1, 2, 2), (1, 1, 0), (1, 2, 1), True], [3, None, 1, 1, False]]),
        (MAX1D, [[4, 3, 2, 2], [3, 1, 1, 1]]),
    ],
    ids=["avg2d_epilogue", "max3d", "max1d"],
)
def test_window_parameters_are_read_at_run_time(source: str, inits: list[list[Any]], tmp_path: Path) -> None:
    task = make_task("synthetic/pool", source)
    assert RulesGenerator().applies(KEY, task)
    candidate = default_recipes()[KEY].emit(task_view(task), KernelConfig(block=32, num_warps=1))
    assert_clean_static(candidate)
    for init in inits:  # one file, several window configurations: nothing about the window is baked in
        check_against_reference(source, candidate, tmp_path, {}, init_override=init)
    # and other sizes than the file was generated from
    other = {"batch_size": 3, "channels": 3, "width": 17, "length": 31}
    present = module_constants(ast.parse(source))
    check_against_reference(source, candidate, tmp_path, {k: v for k, v in other.items() if k in present})


def test_generated_file_is_named_commented_and_size_free() -> None:
    source = (KB / "level2/82_Conv2d_Tanh_Scaling_BiasAdd_Max.py").read_text(encoding="utf-8")
    candidate = default_recipes()[KEY].emit(
        task_view(make_task("kernelbench/level2/82", source)), KernelConfig(block=1024)
    )
    assert "def max_pool2d_fused_kernel(" in candidate and "def max_pool2d_fused(" in candidate
    assert "y = self.conv(x)  # library op, unchanged" in candidate
    assert "self.max_pool)" in candidate and "float(self.scaling_factor)" in candidate
    code = candidate.split("class ModelNew")[0]
    for size in ("254", "256", "128", "63"):  # the task's sizes appear nowhere in the file
        assert re.search(rf"\b{size}\b", code) is None, size
    assert "Model(" not in candidate.replace("ModelNew(", "") and "try:" not in candidate
