"""The rules generator on an imported Robust-KBench task (functional `forward_fn` + `fn=` default + shape
introspection), through the real SubprocessEvaluator at smoke sizes (Triton under the interpreter).

The task is the sample at test sizes (robust_kbench_small.py: the same code and configuration structure, feature
dims shrunk). The evaluator's `task_configs` check runs every declared configuration (batch 1/8, random/standard
init, 1 or 4 features), so a kernel that baked the analysed normalized_shape (4, 8, 16) would fail multi1.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from htam_graph.importers.robust_kbench import scan
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.model import EvalRequest, Task
from htam_graph.rules import KernelConfig
from htam_graph.rules.generator import RulesGenerator, task_view
from htam_graph.rules.recipes import default_recipes

_load = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]
small_sample = _load("robust_kbench_small").small_sample
KEY = "reduction_structure.single_pass_norm"


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return scan(small_sample(tmp_path_factory.mktemp("tasks"))).tasks[0]


def test_norm_recipe_applies_to_the_layernorm_sample(task: Task) -> None:
    assert KEY in RulesGenerator().recipes_for(task)


def test_generated_layer_norm_passes_every_config(task: Task, tmp_path: Path) -> None:
    # rows of 512 (4 x 8 x 16) in tiles of 256: the looped Welford kernel that full-size rows take
    candidate = default_recipes()[KEY].emit(task_view(task), KernelConfig(block=256))  # type: ignore[arg-type]
    assert "_combine_welford" in candidate
    assert "tuple(self.weight.shape)" in candidate  # normalized_shape read at run time, not baked
    request = EvalRequest(
        task_key=task.key, task_source=task.source, candidate_source=candidate, device="cpu", shape="smoke",
        candidate_kind="kernel", trials=2, extra_shapes=0, timing_runs=1, warmup_runs=0,
        measure_baselines=False, timeout_s=600,
    )  # fmt: skip
    result = SubprocessEvaluator(cache_dir=tmp_path / "cache").evaluate(request)
    assert result.error_kind is None, (result.error_kind, result.error_excerpt, result.checks)
    assert result.compiled and result.correct
    note = result.checks["task_configs"]
    assert note.startswith("pass") and "multi1" in note and "multi8" in note, note
    assert result.checks["kernel_launched"].startswith("pass")
    assert result.checks["static_source"].startswith("pass")
