"""One rule-generated kernel per recipe goes through the real SubprocessEvaluator (CPU, smoke shapes).

The evaluator runs the candidate in a child process under TRITON_INTERPRET=1 with its own defences (static
checks, poisoned memory, input-mutation checks, kernel-launch counting, a re-check after timing). The kernels
are emitted with a large BLOCK so the interpreter runs few programs; the code is otherwise the same.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.model import EvalRequest, Task
from htam_graph.rules import KernelConfig
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"


@pytest.mark.parametrize(
    ("rel", "key"),
    [
        ("level1/26_GELU_.py", "fusion.elementwise_chain"),
        ("level2/76_Gemm_Add_ReLU.py", "fusion.library_epilogue"),
        ("level1/24_LogSoftmax.py", "reduction_structure.row_softmax"),  # smoke rows are long: looped kernel
    ],
)
def test_recipe_kernel_is_correct_in_the_real_evaluator(rel: str, key: str) -> None:
    source = (KB / rel).read_text(encoding="utf-8")
    task = Task(
        key=f"kernelbench/{rel[:-3]}",
        suite="kernelbench",
        level=None,
        name=rel,
        source=source,
        source_sha256="0" * 64,
    )
    config = KernelConfig(block=16384, num_warps=16, max_single_block=16384)
    candidate = default_recipes()[key].emit(task_view(task), config)
    request = EvalRequest(
        task_key=task.key,
        task_source=source,
        candidate_source=candidate,
        device="cpu",
        shape="smoke",
        trials=1,
        extra_shapes=0,
        timing_runs=1,
        warmup_runs=0,
        measure_baselines=False,
        timeout_s=300,
    )
    result = SubprocessEvaluator().evaluate(request)
    assert result.error_kind is None, result.error_excerpt
    assert result.compiled and result.correct
    assert result.checks["kernel_launched"].startswith("pass")
    assert result.checks["static_source"].startswith("pass")
    assert result.max_abs_err is not None and result.max_abs_err <= 1e-4
