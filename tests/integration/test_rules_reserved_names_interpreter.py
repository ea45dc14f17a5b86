"""Operands named like the generated code's own locals, under TRITON_INTERPRET=1 on the CPU.

A task's scalar attributes `self.r`, `self.m`, `self.s` and an input `tile` share their names with the row
index, running max / sum and program tile of the reduction templates. Every recipe that applies (tuning
recipes re-emit one of these) must rename them: each candidate is run against the reference at two shapes
(parameters randomised and shared, allclose(rtol=1e-4, atol=1e-4)).
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from htam_graph.rules.generator import default_generator, task_view
from htam_graph.rules.recipes import default_recipes
from htam_graph.rules.recipes.tuning import TuningRecipe

_checks = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"](
    "composed_checks"
)

TASK = """class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.r, self.m, self.s = 1.5, 0.25, 3.0

    def forward(self, tile):
        y = torch.logsumexp(tile * self.r + self.m, dim=(2, 3))
        return y / self.s


def get_inputs():
    return [torch.randn{shape}]


def get_init_inputs():
    return []
"""
SHAPES = [(2, 3, 5, 7), (3, 2, 4, 9)]
SOURCES = [_checks.HEADER + TASK.format(shape=shape) for shape in SHAPES]
RECIPES = [
    key
    for key in default_generator().recipes_for(_checks.make_task("names", SOURCES[0]))
    if not isinstance(default_recipes()[key], TuningRecipe)
]


def test_several_recipes_apply() -> None:
    assert {"reduction_structure.online_logsumexp", "fusion.composed_kernels"} <= set(RECIPES), RECIPES


@pytest.mark.parametrize("key", RECIPES)
def test_operands_named_like_template_locals_are_renamed(key: str, tmp_path: Path) -> None:
    recipe = default_recipes()[key]
    candidates = [
        recipe.emit(task_view(_checks.make_task("names", s)), recipe.default_config) for s in SOURCES
    ]
    errors = _checks.run_checks(SOURCES, candidates, tmp_path)
    assert len(errors) == 2 and all(e <= 1e-4 for e in errors), errors
