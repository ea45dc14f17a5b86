"""fusion.conv_reduction_epilogue through the real SubprocessEvaluator (CPU, smoke shapes, TRITON_INTERPRET=1).

The evaluator runs the candidate in a child process with its own defences (static checks, poisoned memory,
input-mutation checks, kernel-launch counting, several trials with fresh inputs). One chain (minutes on a
shared CPU at the task's own smoke shape, so it runs on smaller images): group norm -> tanh ->
hardswish -> residual add -> logsumexp over channels, i.e. the statistics kernels and the channel-tile kernel;
the other shapes of the recipe are covered by the interpreter test (test_rules_conv_reduce_interpreter.py).
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

rev = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]("recipe_evaluation")
KB = rev.KB
KEY = "fusion.conv_reduction_epilogue"


# At the task's own smoke shape (62x62 outputs) this took 2-9 minutes alone on the 2-core machine and ran past
# the evaluator's 600 s on a shared one. On 16x16 images it took ~300 s in a full run (slow tier, tests/slow.txt);
# on 8x8 images with 8 channels in 2 groups (4 a group, as the task's 64 in 16), ~27 s (16 channels in 4 groups:
# ~41 s): the same kernel source, fewer programs for the interpreter (each costs per launch, whatever its size).
@pytest.mark.timeout(1500)
@pytest.mark.parametrize(
    "sizes",
    [{"height": 8, "width": 8, "out_channels": 8, "groups": 2}, {"height": 16, "width": 16}],
    ids=["8x8_c8_g2", "16x16"],
)
def test_recipe_kernel_is_correct_in_the_real_evaluator(sizes: dict[str, int]) -> None:
    rel = "level2/92_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp.py"
    task = rev.kb_task(rel, sizes)
    recipe = default_recipes()[KEY]
    candidate = recipe.emit(task_view(task), recipe.default_config)  # type: ignore[arg-type]
    rev.assert_correct_in_real_evaluator(task, candidate)
