"""A channels-last conv rule kernel through the real SubprocessEvaluator (CPU, smoke sizes, TRITON_INTERPRET=1).

The evaluator runs the candidate in a child process with its own defences (static checks, poisoned memory,
input-mutation checks, kernel-launch counting, several trials with fresh inputs) and its own fp32 1e-4 check.
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
KEY = "library_offload.channels_last_conv"


@pytest.mark.parametrize("rel", ["level1/82_conv_depthwise_2D_square_input_square_kernel.py"])
def test_channels_last_kernel_is_correct_in_the_real_evaluator(rel: str) -> None:
    task = rev.kb_task(rel)
    # large tiles: the interpreter runs few programs; the code is otherwise the default one
    candidate = default_recipes()[KEY].emit(task_view(task), KernelConfig(block=8192, num_warps=8))  # type: ignore[arg-type]
    rev.assert_correct_in_real_evaluator(task, candidate)
