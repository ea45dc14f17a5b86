"""Composed kernels (fusion.composed_kernels) on a CUDA GPU: the CPU interpreter tests' own small tasks, then
reductions at GPU sizes whose rows split across programs (phase 0 partial statistics, phase 1 merge).

The cases are those of tests/integration/test_rules_composed_interpreter.py, _views_interpreter.py and
_split_interpreter.py (read from those files, so the lists stay one). A views case's candidate is written at
its first size set and run at both, as on the CPU. Each candidate is
written by the composed recipe, checked against the reference on the task's inputs and on `signed` copies
(rules_gpu_support.check_case: same seed, TF32 off, allclose(rtol=1e-4, atol=1e-4)), and the large cases are
also timed against eager (a RULES_GPU line per case; timings are information, never an assertion).
"""

from __future__ import annotations

import math
import runpy
from pathlib import Path

import pytest

from htam_graph.model import Task
from htam_graph.rules import KernelConfig
from htam_graph.rules.compose import KEY
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes
from tests.gpu.rules_gpu_support import FP32_STRICT, GPU_MARKS, check_case, import_candidate, report, run_case

pytestmark = [*GPU_MARKS, FP32_STRICT]

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"
HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
COMPOSED = runpy.run_path(str(INTEGRATION / "test_rules_composed_interpreter.py"))["CASES"]
VIEWS = runpy.run_path(str(INTEGRATION / "test_rules_composed_views_interpreter.py"))["CASES"]
_SPLIT = runpy.run_path(str(INTEGRATION / "test_rules_composed_split_interpreter.py"))
SPLIT_CASES, SPLIT_TEMPLATE = _SPLIT["CASES"], _SPLIT["TEMPLATE"]
SMALL = KernelConfig(block=16, num_warps=2)

# name -> input shape at GPU size: few rows of 2^22-2^26 elements, so the default tile must split them.
LARGE: dict[str, tuple[int, ...]] = {
    "frobenius_normalise": (16, 64, 256, 256),
    "sum_over_rows_then_relu": (4, 1024, 4096),
    "amax_over_batch": (1 << 22, 4),
    "min_over_last": (2, 1 << 24),
    "logsumexp_rows": (8, 1 << 22),
    "softmax_rows": (4, 1 << 22),
    "variance_with_a_large_mean": (4096, 4096),
    "standardise_rows": (8, 1 << 22),
}


def _task(name: str, source: str) -> Task:
    return Task(key=f"composed/{name}", suite="kernelbench", level=2, name=f"{name}.py", source=source,
                source_sha256="0" * 64)  # fmt: skip


def _emit(task: Task, config: KernelConfig | None = None) -> str:
    recipe = default_recipes()[KEY]
    view = task_view(task)
    verdict = recipe.check(view)
    assert verdict, verdict.reason
    return recipe.emit(view, recipe.default_config if config is None else config)


def _split_source(name: str, shape: tuple[int, ...]) -> str:
    body = SPLIT_CASES[name][0]
    return str(HEADER + SPLIT_TEMPLATE.format(body=body, shape=shape))


def _n_split(candidate: str, shape: tuple[int, ...], config: KernelConfig, directory: Path) -> int:
    """n_split of the candidate's first reducing launcher at `shape`, from the candidate's own helpers."""
    ns = vars(import_candidate(candidate, directory))
    launcher = next(line for line in candidate.splitlines() if "row_layout(full_shape" in line)
    dims, middle, groups = eval(launcher.split("row_layout(full_shape, ")[1].rstrip(")"))  # noqa: S307
    n_keep, n_red, inner = ns["row_layout"](shape, dims, middle, groups)
    block_k, block_r = ns["row_tiles"](n_keep, n_red, inner, middle, config.block)
    return int(ns["row_split"](math.ceil(n_keep / block_k), n_red, block_r, True)[0])


@pytest.mark.parametrize("name", list(COMPOSED))
@pytest.mark.parametrize("size", [0, 1])
def test_composed_kernel_matches_on_cuda(name: str, size: int, tmp_path: Path) -> None:
    template, sizes = COMPOSED[name]
    task = _task(name, HEADER + template.format(**sizes[size]))
    check_case(task, _emit(task), tmp_path)


@pytest.mark.parametrize("name", list(VIEWS))
def test_views_candidate_holds_at_another_size_on_cuda(name: str, tmp_path: Path) -> None:
    template, sizes, kept = VIEWS[name]
    candidate = _emit(_task(name, HEADER + template.format(**sizes[0])))
    assert kept in candidate
    for size in sizes:
        check_case(_task(name, HEADER + template.format(**size)), candidate, tmp_path)


@pytest.mark.parametrize("name", list(SPLIT_CASES))
def test_split_rows_match_on_cuda_with_a_small_tile(name: str, tmp_path: Path) -> None:
    shape = SPLIT_CASES[name][1][0]
    task = _task(name, _split_source(name, shape))
    candidate = _emit(task, SMALL)
    assert _n_split(candidate, shape, SMALL, tmp_path) > 1, "the case must split its rows"
    check_case(task, candidate, tmp_path)


@pytest.mark.parametrize("name", list(LARGE))
def test_split_rows_at_gpu_size(name: str, tmp_path: Path) -> None:
    shape = LARGE[name]
    task = _task(name, _split_source(name, shape))
    recipe = default_recipes()[KEY]
    candidate = _emit(task)
    n_split = _n_split(candidate, shape, recipe.default_config, tmp_path)
    assert n_split > 1, "the default tile must split these rows"
    result = run_case(task, candidate, tmp_path)
    report("RULES_GPU composed_split", name, shape, result=result, extra=f" n_split={n_split}")
