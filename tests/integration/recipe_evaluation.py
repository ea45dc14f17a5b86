"""A rules kernel through the real SubprocessEvaluator on the CPU at smoke shapes: the shared body of the
tests/integration/test_rules_*_evaluator.py files.

The evaluator runs the candidate in a child process (TRITON_INTERPRET=1 is inherited) with its own defences:
static checks, poisoned memory, input-mutation checks, kernel-launch counting, several trials with fresh inputs.

Loaded by path (`load_sibling("recipe_evaluation")`, see sibling_module.py): pytest runs with
--import-mode=importlib, so this folder is not a package. It is not assertion-rewritten by pytest, so every
assert here carries its own message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from htam_graph.kernels_runtime.parent.corpus import shrink_task
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.model import EvalRequest, EvalResult, Task

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"


def kb_task(rel: str, sizes: dict[str, int] | None = None) -> Task:
    """The dev-split task at `KB/rel` (e.g. "level1/40_LayerNorm.py") under the key kernelbench/<rel - .py>;
    `sizes` re-binds size constants first (smaller CPU test sizes; the smoke search then shrinks inside them)."""
    source = (KB / rel).read_text(encoding="utf-8")
    if sizes:
        source = shrink_task(source, sizes)
    return Task(
        key=f"kernelbench/{rel[:-3]}",
        suite="kernelbench",
        level=None,
        name=rel,
        source=source,
        source_sha256="0" * 64,
    )


def smoke_request(task: Task, candidate: str, *, trials: int = 3, **fields: Any) -> EvalRequest:
    """A CPU request at the smoke shape: `trials` correctness trials, no extra shapes, one timed run, no baselines."""
    values: dict[str, Any] = {
        "task_key": task.key,
        "task_source": task.source,
        "candidate_source": candidate,
        "device": "cpu",
        "shape": "smoke",
        "candidate_kind": "kernel",
        "trials": trials,
        "extra_shapes": 0,
        "timing_runs": 1,
        "warmup_runs": 0,
        "measure_baselines": False,
        "timeout_s": 600,
    }
    return EvalRequest(**(values | fields))


def assert_correct_in_real_evaluator(task: Task, candidate: str, *, trials: int = 3) -> EvalResult:
    """Evaluate `candidate` and require: compiled, correct, no error, a custom kernel launched, clean source."""
    result = SubprocessEvaluator().evaluate(smoke_request(task, candidate, trials=trials))
    assert result.error_kind is None, f"{result.error_kind}: {result.error_excerpt}"
    assert result.compiled and result.correct, f"not correct: {result.error_excerpt}"
    for check in ("kernel_launched", "static_source"):
        verdict = result.checks.get(check, "missing")
        assert verdict.startswith("pass"), f"{check}: {verdict}"
    return result
