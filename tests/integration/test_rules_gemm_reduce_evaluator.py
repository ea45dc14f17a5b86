"""GEMM + row-reduction recipes through the real SubprocessEvaluator (CPU, smoke shapes, TRITON_INTERPRET=1).

The evaluator runs each candidate in a child process with its own defences (static checks, poisoned memory,
input-mutation checks, kernel-launch counting, several trials with fresh inputs and seeds). Cases: batch norm
in training mode + softmax (two kernels), training-mode dropout kept as torch's call before the fused softmax
(the harness seeds both forwards alike), and the avg-pool-into-the-weights rewrite.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.kernels_runtime.evaluator import SubprocessEvaluator
from htam_graph.model import EvalRequest, Task
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

KB = Path(__file__).resolve().parents[2].parent / "shared" / "kernelbench"

pytestmark = pytest.mark.skipif(not KB.is_dir(), reason="no KernelBench checkout beside the checkout")


@pytest.mark.parametrize(
    ("rel", "key"),
    [
        ("level2/84_Gemm_BatchNorm_Scaling_Softmax.py", "fusion.reduction_with_epilogue"),
        ("level2/66_Matmul_Dropout_Softmax.py", "fusion.reduction_with_epilogue"),
        ("level2/98_Matmul_AvgPool_GELU_Scale_Max.py", "algebraic_rewrite.reduce_before_linear"),
    ],
    ids=["84-row", "66-row-dropout", "98-rewrite"],
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
    recipe = default_recipes()[key]
    candidate = recipe.emit(task_view(task), recipe.default_config)  # type: ignore[arg-type]
    request = EvalRequest(
        task_key=task.key,
        task_source=source,
        candidate_source=candidate,
        device="cpu",
        shape="smoke",
        candidate_kind="kernel",
        trials=3,
        extra_shapes=0,
        timing_runs=1,
        warmup_runs=0,
        measure_baselines=False,
        timeout_s=600,
    )
    result = SubprocessEvaluator().evaluate(request)
    assert result.error_kind is None, result.error_excerpt
    assert result.compiled and result.correct
    assert result.checks["kernel_launched"].startswith("pass")
    assert result.checks["static_source"].startswith("pass")
