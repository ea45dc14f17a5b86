"""A rules run on a task with `torch.min(x, torch.tensor(c))` (the H200 bench's conv + min + bias + scale case,
written small here): on the real embedded graph with the real subprocess evaluator and Triton under the
interpreter, its kernels are correct. Before the analysis inlined fx's `_tensor_constant0`, every step failed with
`'ModelNew' object has no attribute '_tensor_constant0'`."""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph import memory
from htam_graph.importers.kernelbench import parse_task
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.loop import OptimizationLoop, RunConfig
from htam_graph.model import Task
from htam_graph.rules import RulesGenerator
from htam_graph.seed import load_seed
from htam_graph.settings import PolicySettings

TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, constant_value, bias_shape, scaling_factor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.constant_value = constant_value
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.conv(x)
        x = torch.min(x, torch.tensor(self.constant_value))
        x = x + self.bias
        x = x * self.scaling_factor
        return x


batch_size = 2
in_channels = 3
out_channels = 4
height, width = 10, 10
kernel_size = 3
constant_value = 0.25
bias_shape = (out_channels, 1, 1)
scaling_factor = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, constant_value, bias_shape, scaling_factor]
"""


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _task(tmp_path: Path) -> Task:
    path = tmp_path / "level2" / "900_Conv2d_Min_Add_Multiply.py"
    path.parent.mkdir(parents=True)
    path.write_text(TASK, encoding="utf-8")
    task = parse_task(path, tmp_path)
    assert isinstance(task, Task), task
    return task


def test_a_rules_run_with_a_tensor_constant_in_forward_gets_correct_kernels(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    memory.seed_memory(store, load_seed())
    task = _task(tmp_path)
    generator = RulesGenerator()
    assert "fusion.library_epilogue" in generator.recipes_for(task)
    result = OptimizationLoop(
        store,
        SubprocessEvaluator(cache_dir=tmp_path / "cache"),
        generator,
        PolicySettings(),
        RunConfig(device="cpu", shape="default", steps=2, trials=2, timing_runs=1),
        executable_locals=generator.recipes_for,
    ).run(task)
    assert len(result.steps) == 2
    for step in result.steps:
        assert step.status != "failed", (step.local_key, step.error_kind, step.error_excerpt)
        assert step.source is not None and "_tensor_constant" not in step.source
        assert step.result is not None and step.result.checks["kernel_launched"].startswith("pass")
    assert not result.best_is_reference and "@triton.jit" in result.best_source
    # the constant is read from the attribute at run time, not baked (a configuration with another c is right too)
    assert "self.constant_value" in result.best_source
