"""Composed kernels for functional norms and cross-entropy, under TRITON_INTERPRET=1 on the CPU.

Each case is a small task of this file's own: `F.group_norm` (with and without affine parameters, a group
count that is a model attribute or a literal), `F.rms_norm`, `F.instance_norm` and cross-entropy
(`F.cross_entropy`, `nn.CrossEntropyLoss`, with elementwise ops on the logits, spatial targets and ignored
targets), with elementwise ops before and after. The candidate is written by the real rules generator for the
composed strategy and run at two input shapes in a process that had TRITON_INTERPRET=1 from the start
(interp_child.py); the reference and ModelNew share their parameters, randomised first. A Robust-KBench-style
task (`forward_fn(x, weight, bias, num_groups, eps)`) is imported from a task folder, and its kernel, written
for one configuration, is also run at another configuration with a different group count.
allclose(rtol=1e-4, atol=1e-4).
"""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from htam_graph.importers.robust_kbench import scan
from htam_graph.model import Task
from htam_graph.rules import KernelConfig
from htam_graph.rules.compose import KEY
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

_checks = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"](
    "composed_checks"
)
HEADER, make_task, generate, run_checks = (
    _checks.HEADER,
    _checks.make_task,
    _checks.generate,
    _checks.run_checks,
)

# name -> (task source with {placeholders} for the sizes, two size sets)
CASES: dict[str, tuple[str, list[dict[str, int]]]] = {
    "group_norm_affine_attr_groups": (
        """class Model(nn.Module):
    def __init__(self, c, groups):
        super().__init__()
        self.groups = groups
        self.weight = nn.Parameter(torch.ones(c))
        self.bias = nn.Parameter(torch.zeros(c))

    def forward(self, x):
        y = F.group_norm(x * 2.0 - 1.0, self.groups, self.weight, self.bias, eps=1e-5)
        return torch.relu(y) + 0.5


def get_inputs():
    return [torch.randn({b}, {c}, {h}, {w}) * 3 + 4]


def get_init_inputs():
    return [{c}, {g}]
""",
        [{"b": 2, "c": 6, "h": 5, "w": 4, "g": 3}, {"b": 3, "c": 8, "h": 3, "w": 7, "g": 2}],
    ),
    "group_norm_plain_literal_groups": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.group_norm(torch.sigmoid(x), 2) * 3.0


def get_inputs():
    return [torch.randn({b}, {c}, {n})]


def get_init_inputs():
    return []
""",
        [{"b": 3, "c": 4, "n": 9}, {"b": 2, "c": 6, "n": 33}],
    ),
    "rms_norm_weight_eps": (
        """class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return F.gelu(F.rms_norm(x + 1.0, ({n},), self.weight, eps=1e-6))


def get_inputs():
    return [torch.randn({b}, {t}, {n})]


def get_init_inputs():
    return [{n}]
""",
        [{"b": 2, "t": 5, "n": 12}, {"b": 3, "t": 2, "n": 40}],
    ),
    "rms_norm_dtype_eps": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.rms_norm(x, [{n}]) - 0.25


def get_inputs():
    return [torch.randn({b}, {n})]


def get_init_inputs():
    return []
""",
        [{"b": 7, "n": 24}, {"b": 3, "n": 65}],
    ),
    "instance_norm_affine_tanh": (
        """class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.w = nn.Parameter(torch.ones(c))
        self.b = nn.Parameter(torch.zeros(c))

    def forward(self, x):
        return torch.tanh(F.instance_norm(x * 0.5, weight=self.w, bias=self.b, momentum=0.3, eps=1e-5))


def get_inputs():
    return [torch.randn({b}, {c}, {h}, {w}) + 5]


def get_init_inputs():
    return [{c}]
""",
        [{"b": 2, "c": 3, "h": 6, "w": 5}, {"b": 3, "c": 2, "h": 4, "w": 11}],
    ),
    "cross_entropy_functional": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, t):
        return F.cross_entropy(x, t)


def get_inputs():
    return [torch.randn({b}, {c}) * 4, torch.randint(0, {c}, ({b},))]


def get_init_inputs():
    return []
""",
        [{"b": 9, "c": 10}, {"b": 5, "c": 70}],
    ),
    "cross_entropy_scaled_logits": (
        """class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, t):
        return F.cross_entropy(torch.tanh(x) * self.scale + 0.1, t) * 2.0


def get_inputs():
    return [torch.randn({b}, {c}), torch.randint(0, {c}, ({b},))]


def get_init_inputs():
    return [3.5]
""",
        [{"b": 6, "c": 17}, {"b": 11, "c": 5}],
    ),
    "cross_entropy_module_spatial_ignored": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, t):
        return self.loss(x - 1.0, t)


def get_inputs():
    t = torch.randint(0, {c}, ({b}, {d}))
    t[0, 1] = -100  # ignored: neither summed nor counted
    return [torch.randn({b}, {c}, {d}) * 2, t]


def get_init_inputs():
    return []
""",
        [{"b": 3, "c": 6, "d": 5}, {"b": 2, "c": 13, "d": 4}],
    ),
    "cross_entropy_sum_and_none": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, t):
        return F.cross_entropy(x, t, reduction="sum") + F.cross_entropy(x, t, reduction="none")


def get_inputs():
    t = torch.randint(0, {c}, ({b},))
    t[-1] = -100
    return [torch.randn({b}, {c}), t]


def get_init_inputs():
    return []
""",
        [{"b": 5, "c": 7}, {"b": 8, "c": 33}],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_composed_kernel_matches_reference_at_two_shapes(name: str, tmp_path: Path) -> None:
    template, sizes = CASES[name]
    sources = [HEADER + template.format(**size) for size in sizes]
    candidates = [generate(make_task(name, source)) for source in sources]
    errors = run_checks(sources, candidates, tmp_path)
    assert len(errors) == 2 and all(e <= 1e-4 for e in errors), errors


@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("cross_entropy_functional", {"b": 37, "c": 70}),
        ("cross_entropy_module_spatial_ignored", {"b": 3, "c": 13, "d": 7}),
    ],
)
def test_cross_entropy_rows_longer_than_one_tile(name: str, size: dict[str, int], tmp_path: Path) -> None:
    """Tiles of 16: the logsumexp and the picked target logit are carried across several tiles of a row, and
    the mean's sum and count across several tiles of the rows (more than 16 of them)."""
    sources = [HEADER + CASES[name][0].format(**size)]
    recipe = default_recipes()[KEY]
    candidates = [recipe.emit(task_view(make_task(name, s)), KernelConfig(block=16)) for s in sources]
    assert "BLOCK_COMPOSED_0 = 16 " in candidates[0] and "BLOCK_COMPOSED_1 = 16 " in candidates[0]
    errors = run_checks(sources, candidates, tmp_path)
    assert len(errors) == 1 and errors[0] <= 1e-4, errors


ROBUST_FORWARD = '''import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, num_groups: int, eps: float
) -> torch.Tensor:
    """Group normalisation of x, then a scaled SiLU."""
    return F.silu(F.group_norm(x, num_groups, weight, bias, eps)) * 1.5


class Model(nn.Module):
    def __init__(self, num_features: int, num_groups: int, eps: float = 1e-5):
        super().__init__()
        self.num_groups = num_groups
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))

    def forward(self, x: torch.Tensor, fn=forward_fn) -> torch.Tensor:
        return fn(x, self.weight, self.bias, self.num_groups, self.eps)


def get_inputs(batch_size: int = 2, num_features: int = 6, dim1: int = 5, dim2: int = 3):
    return [torch.randn(batch_size, num_features, dim1, dim2) * 2 + 3]
'''


def robust_task(root: Path, name: str, shared: dict[str, int]) -> Task:
    """A Robust-KBench task folder with one configuration (`shared` sizes), imported as a task."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "func_forward.py").write_text(ROBUST_FORWARD, encoding="utf-8")
    config = {
        "single_input_configs": [{"batch_size": 2}],
        "single_init_configs": [{"eps": 1e-5}],
        "single_shared_configs": [shared],
    }
    (folder / "config_forward.json").write_text(json.dumps(config), encoding="utf-8")
    tasks = scan(folder).tasks
    assert len(tasks) == 1, tasks
    return tasks[0]


def test_robust_kbench_forward_fn_group_norm_gets_a_composed_kernel(tmp_path: Path) -> None:
    analysed = robust_task(tmp_path, "gn_a", {"num_features": 6, "num_groups": 3, "dim1": 5, "dim2": 3})
    other = robust_task(tmp_path, "gn_b", {"num_features": 8, "num_groups": 2, "dim1": 3, "dim2": 4})
    candidate = generate(analysed)
    assert "group_norm" in candidate
    # the kernel written for 3 groups also serves the configuration with 2: the count is read at run time
    errors = run_checks([analysed.source, other.source], [candidate, candidate], tmp_path)
    assert len(errors) == 2 and all(e <= 1e-4 for e in errors), errors
