"""Composed kernels (fusion.composed_kernels) through the real SubprocessEvaluator (CPU, smoke shape).

The evaluator runs the candidate in a child process under TRITON_INTERPRET=1 with its own defences (static
checks, poisoned memory, input-mutation checks, kernel-launch counting, several trials with fresh inputs). The
tasks are this repository's own small modules (tests/integration/test_rules_composed_interpreter.py).
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

rev = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]("recipe_evaluation")
cases = runpy.run_path(str(Path(__file__).with_name("test_rules_composed_interpreter.py")))


@pytest.mark.parametrize(
    "name", ["linear_gelu_rmsnorm", "conv_scale_sigmoid_groupnorm", "frobenius_division"]
)
def test_composed_kernel_is_correct_in_the_real_evaluator(name: str) -> None:
    template, sizes = cases["CASES"][name]
    task = cases["make_task"](name, cases["HEADER"] + template.format(**sizes[0]))
    rev.assert_correct_in_real_evaluator(task, cases["generate"](task), trials=3)
