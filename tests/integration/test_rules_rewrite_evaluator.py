"""Rule-generated algebraic-rewrite kernels go through the real SubprocessEvaluator (CPU, smoke shapes).

The evaluator runs the candidate in a child process under TRITON_INTERPRET=1 with its own defences (static
checks, poisoned memory, input-mutation checks, kernel-launch counting, a re-check after timing). The kernels are
emitted with a large BLOCK so the interpreter runs few programs; the code is otherwise the same.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from htam_graph.rules import KernelConfig
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

rev = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]("recipe_evaluation")
KB = rev.KB


@pytest.mark.parametrize(
    ("rel", "key"),
    [
        ("level1/12_Matmul_with_diagonal_matrices_.py", "algebraic_rewrite.diag_matmul_as_broadcast"),
        ("level2/40_Matmul_Scaling_ResidualAdd.py", "algebraic_rewrite.drop_noops"),
    ],
    ids=["diag_matmul_as_broadcast", "drop_noops"],
)
def test_rewrite_kernel_is_correct_in_the_real_evaluator(rel: str, key: str) -> None:
    task = rev.kb_task(rel)
    candidate = default_recipes()[key].emit(task_view(task), KernelConfig(block=4096, num_warps=8))
    result = rev.assert_correct_in_real_evaluator(task, candidate, trials=5)
    assert result.max_abs_err is not None and result.max_abs_err <= 1e-4
