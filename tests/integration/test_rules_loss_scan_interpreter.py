"""Loss (full reduction) and scan rule kernels under TRITON_INTERPRET=1 on the CPU, against Model.

Dev-split tasks at small sizes (module constants overridden; the scans also with `dim` overridden to 0, the
strided columns kernel) plus synthetic forwards for the forms the dev split lacks (sum / batchmean / log_target
losses, row and 0-d broadcasts, leading / negative scan dims, cumprod near 1). Each generated file is run with
the default config and with BLOCK=16 and MAX_PARTIALS=3 (several tiles per program, several chunks per row,
masked tails, carried prefixes), on the task's own inputs and a second draw (plus a signed copy x * 6 - 3
where the loss is defined for it: Huber's linear branch). allclose(rtol=1e-4, atol=1e-4); the loss kernels are
also run twice and must agree bit for bit (fixed combine order). Every check runs in a fresh child process
with TRITON_INTERPRET=1 set before triton is imported.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest
import torch

from htam_graph.kernels_runtime.worker.taskmod import load_task_module
from htam_graph.model import Task
from htam_graph.rules import KernelConfig, RulesGenerator
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

INTERP_CHILD = Path(__file__).with_name("interp_child.py")  # the shared child-process runner
import_candidate = runpy.run_path(str(Path(__file__).with_name("candidate_import.py")))["import_candidate"]
KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
LOSS = "fusion.pointwise_into_reduction"
SCAN = "reduction_structure.block_scan"
_PAIR = {"batch_size": 7, "input_shape": [45]}
_ROWS = {"batch_size": 5, "input_shape": [70]}

# (dev task, recipe, overrides, signed copy is a valid input)
KB_CASES: list[tuple[str, str, dict[str, Any], bool]] = [
    ("level1/94_MSELoss.py", LOSS, _PAIR, True),
    ("level1/96_HuberLoss.py", LOSS, _PAIR, True),
    ("level1/98_KLDivLoss.py", LOSS, _PAIR, False),
    ("level1/100_HingeLoss.py", LOSS, {"batch_size": 45, "input_shape": [45]}, False),
    ("level1/90_cumprod.py", SCAN, _ROWS, False),
    ("level1/90_cumprod.py", SCAN, {**_ROWS, "dim": 0}, False),
    ("level1/92_cumsum_exclusive.py", SCAN, _ROWS, True),
    ("level1/92_cumsum_exclusive.py", SCAN, {**_ROWS, "dim": 0}, True),
]

_TWO = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.delta = 0.7

    def forward(self, a, b):
        return {forward}


def get_inputs():
    return [{a}, {b}]


def get_init_inputs():
    return []
"""
_ONE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return {forward}


def get_inputs():
    return [{x}]


def get_init_inputs():
    return [{dim}]
"""
_EXCLUSIVE = "torch.cat((torch.zeros_like(x.select(self.dim, 0).unsqueeze(self.dim)), torch.cumsum(x.narrow(self.dim, 0, x.size(self.dim) - 1), self.dim)), self.dim)"
_MASKED = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x, mask):
        return torch.cumsum(x * mask, dim=self.dim)


def get_inputs():
    return [torch.rand(33, 4), torch.randint(0, 2, (33, 4)).bool()]


def get_init_inputs():
    return [{dim}]
"""
# (name, source, recipe, signed copy is a valid input)
SYNTHETIC: list[tuple[str, str, str, bool]] = [
    ("huber_sum_attr_delta", _TWO.format(forward="F.huber_loss(a, b, reduction='sum', delta=self.delta)", a="torch.rand(6, 33)", b="torch.rand(6, 33)"), LOSS, True),
    ("mse_sum", _TWO.format(forward="F.mse_loss(a, b, reduction='sum')", a="torch.rand(3, 5, 7)", b="torch.rand(3, 5, 7)"), LOSS, True),
    ("l1_mean", _TWO.format(forward="F.l1_loss(a, b)", a="torch.rand(50)", b="torch.rand(50)"), LOSS, True),
    ("kl_log_target", _TWO.format(forward="F.kl_div(a, b, reduction='batchmean', log_target=True)", a="torch.rand(4, 30).log_softmax(-1)", b="torch.rand(4, 30).log_softmax(-1)"), LOSS, True),
    ("row_broadcast_sum", _TWO.format(forward="torch.sum(torch.exp(a) * b - a)", a="torch.rand(3, 4, 9)", b="torch.rand(3, 4, 1)"), LOSS, True),
    ("scalar_broadcast_mean", _TWO.format(forward="(a * b + 1).mean()", a="torch.rand(10, 17)", b="torch.rand(())"), LOSS, True),
    ("cumsum_dim0_3d", _ONE.format(forward="torch.cumsum(x, self.dim)", x="torch.rand(40, 3, 5)", dim=0), SCAN, True),
    ("cumprod_mid_near_one", _ONE.format(forward="torch.cumprod(x, dim=self.dim)", x="torch.rand(2, 50, 3) * 0.02 + 0.99", dim=1), SCAN, True),
    ("exclusive_negative_dim", _ONE.format(forward=_EXCLUSIVE, x="torch.rand(4, 37, 6)", dim=-2), SCAN, True),
    ("masked_cumsum_dim0", _MASKED.format(dim=0), SCAN, True),
    ("masked_cumsum_last", _MASKED.format(dim=-1), SCAN, True),
    ("cumprod_of_sigmoid", _ONE.format(forward="torch.cumprod(torch.sigmoid(x) * 0.1 + 0.9, self.dim)", x="torch.rand(3, 29)", dim=1), SCAN, True),
    ("reverse_cumsum_last", _ONE.format(forward="torch.cumsum(x.flip(self.dim), self.dim).flip(self.dim)", x="torch.rand(3, 41)", dim=1), SCAN, True),
    ("reverse_cumprod_dim0", _ONE.format(forward="torch.flip(torch.cumprod(torch.flip(x, [0]), 0), [0])", x="torch.rand(23, 3, 4) * 0.02 + 0.99", dim=0), SCAN, True),
]  # fmt: skip


def make_task(source: str, key: str) -> Task:
    return Task(key=key, suite="kernelbench", level=None, name=key, source=source, source_sha256="0" * 64)


def check_against_reference(
    task_source: str, candidates: list[str], directory: Path, overrides: dict[str, Any], signed: bool
) -> float:
    """Every candidate against Model on two or three input sets; returns the worst max abs error."""
    ref_mod = load_task_module(
        task_source, "reference", {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    )
    init = list(ref_mod.get_init_inputs())
    model = ref_mod.Model(*init)
    draws = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        draws.append(list(ref_mod.get_inputs()))
    if signed:
        draws.append([x * 6 - 3 if x.is_floating_point() else x for x in draws[0]])
    worst = 0.0
    for index, candidate_source in enumerate(candidates):
        cand = import_candidate(candidate_source, directory)
        if index == 1 and hasattr(cand, "MAX_PARTIALS"):
            cand.MAX_PARTIALS = 3  # few programs: each walks several tiles
        model_new = cand.ModelNew(*init)
        for inputs in draws:
            with torch.no_grad():
                expected = model(*[x.clone() for x in inputs])
                kept = [x.clone() for x in inputs]
                got = model_new(*inputs)
                again = model_new(*inputs)
            assert all(torch.equal(a, b) for a, b in zip(inputs, kept, strict=True)), "inputs changed"
            assert type(got) is torch.Tensor and got.shape == expected.shape and got.dtype == expected.dtype
            assert torch.equal(got, again), "two runs differ"
            assert expected.isfinite().all() and (expected.numel() == 1 or expected.std() > 0), "degenerate"
            err = (got - expected).abs().max().item()
            assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"max abs error {err}"
            worst = max(worst, err)
    return worst


def isolated(function: str, **kwargs: Any) -> Any:
    """Call a function of this module in a fresh process with TRITON_INTERPRET=1 set before any import."""
    run_isolated = runpy.run_path(str(INTERP_CHILD))["run_isolated"]
    return run_isolated(__file__, function, kwargs)


def run_recipe(source: str, key: str, overrides: dict[str, Any], signed: bool, directory: Path) -> float:
    task = make_task(source, "case")
    assert key in RulesGenerator().recipes_for(task)
    recipe = default_recipes()[key]
    default = recipe.emit(task_view(task), recipe.default_config)  # type: ignore[arg-type]
    small = recipe.emit(task_view(task), KernelConfig(block=16, num_warps=2))  # type: ignore[arg-type]
    worst = isolated(
        "check_against_reference",
        task_source=source,
        candidates=[default, small],
        directory=directory,
        overrides=overrides,
        signed=signed,
    )
    return float(worst)


@pytest.mark.parametrize(
    ("rel", "key", "overrides", "signed"),
    KB_CASES,
    ids=[c[0].split("/")[1][:-3] + ("-dim0" if "dim" in c[2] else "") for c in KB_CASES],
)
def test_dev_task_kernel_matches_reference(
    rel: str, key: str, overrides: dict[str, Any], signed: bool, tmp_path: Path
) -> None:
    run_recipe((KB / rel).read_text(encoding="utf-8"), key, overrides, signed, tmp_path)


@pytest.mark.parametrize(("name", "source", "key", "signed"), SYNTHETIC, ids=[c[0] for c in SYNTHETIC])
def test_synthetic_forward_kernel_matches_reference(
    name: str, source: str, key: str, signed: bool, tmp_path: Path
) -> None:
    run_recipe(source, key, {}, signed, tmp_path)


def test_coverage_of_the_dev_split() -> None:
    """recipes_for over level1 + level2 gives exactly the dev tasks listed in KB_CASES for these two recipes."""
    generator = RulesGenerator()
    found: dict[str, set[str]] = {LOSS: set(), SCAN: set()}
    for path in sorted([*KB.glob("level1/*.py"), *KB.glob("level2/*.py")]):
        rel = str(path.relative_to(KB))
        for key in generator.recipes_for(make_task(path.read_text(encoding="utf-8"), rel)):
            if key in found:
                found[key].add(rel)
    for key, tasks in found.items():
        assert tasks == {rel for rel, k, _, _ in KB_CASES if k == key}, key
