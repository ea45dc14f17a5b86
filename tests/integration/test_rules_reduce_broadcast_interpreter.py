"""Operands read per reduced result by the tiled reduction kernel (reduce/launcher.py), under TRITON_INTERPRET=1.

An operand combined with the reduction's result before that result is broadcast back over the input (normalise
mode: `x * sigmoid(mean(x, (2, 3), keepdim=True) * scale) + x`) is laid out against the reduction's own shape,
not the input's. Laid out against the input's, a per-channel scale was read at the wrong channel: a mismatch
the default parameter init (ones) hid. Parameters here are randomised and shared with the reference
(composed_checks.run_checks), at two shapes, with the default tile and with BLOCK=16 (several tiles per row,
split reductions). Tasks are this file's own. allclose(rtol=1e-4, atol=1e-4).
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from htam_graph.rules import KernelConfig
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

_checks = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"](
    "composed_checks"
)
HEADER, make_task, run_checks = _checks.HEADER, _checks.make_task, _checks.run_checks
NORM = "reduction_structure.single_pass_norm"

CASES: dict[str, tuple[str, list[dict[str, int]]]] = {
    "channel_gate_with_scale": (
        """class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(c, 1, 1))

    def forward(self, x):
        g = torch.sigmoid(x.mean(dim=(2, 3), keepdim=True) * self.scale)
        return x * g + x


def get_inputs():
    return [torch.randn({b}, {c}, {h}, {w})]


def get_init_inputs():
    return [{c}]
""",
        [{"b": 3, "c": 5, "h": 4, "w": 6}, {"b": 2, "c": 7, "h": 9, "w": 5}],
    ),
    "centre_with_a_result_shaped_input": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return x - (x.mean(dim=1, keepdim=True) + y)


def get_inputs():
    return [torch.randn({b}, {c}, {w}), torch.randn({b}, 1, {w})]


def get_init_inputs():
    return []
""",
        [{"b": 3, "c": 40, "w": 6}, {"b": 2, "c": 9, "w": 11}],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_operands_of_the_reduced_result_match_at_two_shapes(name: str, tmp_path: Path) -> None:
    template, sizes = CASES[name]
    recipe = default_recipes()[NORM]
    sources, candidates = [], []
    for size in sizes:
        source = HEADER + template.format(**size)
        view = task_view(make_task(name, source))
        assert recipe.check(view), recipe.check(view).reason
        for config in (recipe.default_config, KernelConfig(block=16, num_warps=2)):
            sources.append(source)
            candidates.append(recipe.emit(view, config))  # type: ignore[arg-type]
    errors = run_checks(sources, candidates, tmp_path)
    assert len(errors) == 4 and all(e <= 1e-4 for e in errors), errors
