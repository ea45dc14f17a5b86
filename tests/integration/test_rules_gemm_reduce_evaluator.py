"""GEMM + row-reduction recipes through the real SubprocessEvaluator (CPU, smoke shapes, TRITON_INTERPRET=1).

The evaluator runs each candidate in a child process with its own defences (static checks, poisoned memory,
input-mutation checks, kernel-launch counting, several trials with fresh inputs and seeds). Cases: batch norm
in training mode + softmax (two kernels), training-mode dropout kept as torch's call before the fused softmax
(the harness seeds both forwards alike), and the avg-pool-into-the-weights rewrite.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

rev = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]("recipe_evaluation")
KB = rev.KB


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
    task = rev.kb_task(rel)
    recipe = default_recipes()[key]
    candidate = recipe.emit(task_view(task), recipe.default_config)  # type: ignore[arg-type]
    rev.assert_correct_in_real_evaluator(task, candidate)
