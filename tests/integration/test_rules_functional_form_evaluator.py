"""The rules on an RMSNorm in the functional form (`Model.forward(self, x, fn=forward_fn)`, a module-level
`forward_fn(x, gain, eps)` with `x.float()` / `.type_as(x)` casts, a local `import math` in `__init__`), written
for these tests in the Robust-KBench layout (tests/data/functional_form), through the real SubprocessEvaluator at
smoke sizes under the interpreter: the kernel must pass every configuration the task declares (`task_configs`:
batch, tokens, eps and a hidden size of 48 as well as 64)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from htam_graph.importers.robust_kbench import scan
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.model import EvalRequest, Task
from htam_graph.rules import KernelConfig
from htam_graph.rules.generator import RulesGenerator, task_view
from htam_graph.rules.recipes import default_recipes

FOLDER = Path(__file__).resolve().parents[1] / "data" / "functional_form"
KEY = "reduction_structure.single_pass_norm"


@pytest.fixture(scope="module")
def task() -> Task:
    (found,) = scan(FOLDER).tasks
    return found


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _declared_configurations(source: str) -> list[str]:
    for stmt in ast.parse(source).body:
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "HTAM_TASK_VARIANTS" for t in stmt.targets
        ):
            return list(ast.literal_eval(stmt.value))
    raise AssertionError("the imported task declares no HTAM_TASK_VARIANTS")


def test_the_analysis_sees_through_forward_fn_and_its_casts(task: Task) -> None:
    graph = task_view(task).graph
    assert [n.op for n in graph.nodes] == ["pow", "mean", "add", "rsqrt", "mul", "mul"]
    assert graph.tensor("gain") is not None  # the module's parameter, passed to forward_fn
    assert KEY in RulesGenerator().recipes_for(task)


def test_the_rmsnorm_kernel_passes_every_declared_configuration(task: Task, tmp_path: Path) -> None:
    candidate = default_recipes()[KEY].emit(  # type: ignore[arg-type]
        task_view(task), KernelConfig(block=1024, num_warps=4, max_single_block=1024)
    )
    request = EvalRequest(
        task_key=task.key, task_source=task.source, candidate_source=candidate, device="cpu", shape="smoke",
        trials=2, extra_shapes=0, timing_runs=1, warmup_runs=0, measure_baselines=False, timeout_s=600,
    )  # fmt: skip
    result = SubprocessEvaluator(cache_dir=tmp_path / "cache").evaluate(request)
    assert result.error_kind is None, (result.error_kind, result.error_excerpt, result.checks)
    assert result.correct and result.checks["kernel_launched"].startswith("pass")
    note = result.checks["task_configs"]
    declared = _declared_configurations(task.source)
    assert len(declared) >= 6 and any("hidden=48" in name for name in declared)
    assert note.startswith(f"pass: {len(declared)} configurations"), note
    assert all(name in note for name in declared), note
