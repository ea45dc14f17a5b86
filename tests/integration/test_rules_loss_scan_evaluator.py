"""One loss kernel and one scan kernel through the real SubprocessEvaluator (CPU, TRITON_INTERPRET=1, smoke).

The evaluator runs the candidate in a child process with its own defences (static checks, poisoned memory,
input-mutation checks, kernel-launch counting, several trials with fresh inputs).
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
        ("level1/100_HingeLoss.py", "fusion.pointwise_into_reduction"),
        ("level1/92_cumsum_exclusive.py", "reduction_structure.block_scan"),
    ],
)
def test_recipe_kernel_is_correct_in_the_real_evaluator(rel: str, key: str) -> None:
    task = rev.kb_task(rel)
    recipe = default_recipes()[key]
    candidate = recipe.emit(task_view(task), recipe.default_config)  # type: ignore[arg-type]
    rev.assert_correct_in_real_evaluator(task, candidate)
