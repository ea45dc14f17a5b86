"""data_reuse.pooling_window_reuse: where it applies in the dev split, and why it does not elsewhere.

No kernel runs here (see tests/integration/test_rules_pool_interpreter.py for the interpreted kernels).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.model import Language, Task
from htam_graph.rules import RulesGenerator, applies, parse_header
from htam_graph.rules.base import KernelConfig
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
KEY = "data_reuse.pooling_window_reuse"
POOL_TASKS = {
    "level1/42_Max_Pooling_2D.py",
    "level1/44_Average_Pooling_1D.py",
    "level1/46_Average_Pooling_3D.py",
    "level2/46_Conv2d_Subtract_Tanh_Subtract_AvgPool.py",
    "level2/50_ConvTranspose3d_Scaling_AvgPool_BiasAdd_Scaling.py",
    "level2/74_ConvTranspose3d_LeakyReLU_Multiply_LeakyReLU_Max.py",
    "level2/82_Conv2d_Tanh_Scaling_BiasAdd_Max.py",
}


def task(rel: str, source: str | None = None) -> Task:
    text = source if source is not None else (KB / rel).read_text(encoding="utf-8")
    return Task(key=rel, suite="kernelbench", level=None, name=rel, source=text, source_sha256="0" * 64)


def test_pool_coverage_of_the_dev_split() -> None:
    generator = RulesGenerator()
    found = set()
    for path in sorted([*KB.glob("level1/*.py"), *KB.glob("level2/*.py")]):
        rel = str(path.relative_to(KB))
        if KEY in generator.recipes_for(task(rel), "cuda", Language.TRITON):
            found.add(rel)
    assert found == POOL_TASKS


def test_pool_tasks_are_tunable() -> None:
    for rel in sorted(POOL_TASKS):
        assert applies("parallelism.block_size_tuning", task(rel)), rel


FUNCTIONAL = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.avg_pool2d(x, 2)


def get_inputs():
    return [torch.randn(2, 3, 8, 8)]


def get_init_inputs():
    return []
"""

UNBATCHED = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(3, 8, 8)]


def get_init_inputs():
    return []
"""

READ_TWICE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        y = torch.relu(x)
        return self.pool(y) + y.mean()


def get_inputs():
    return [torch.randn(2, 3, 8, 8)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize(
    ("rel", "source", "reason"),
    [
        ("level1/26_GELU_.py", None, "no max/avg pooling op"),
        ("level2/6_Conv3d_Softmax_MaxPool_MaxPool.py", None, "2 pooling ops"),
        ("level2/10_ConvTranspose2d_MaxPool_Hardtanh_Mean_Tanh.py", None, "neither elementwise nor the pool"),
        ("level2/72_ConvTranspose3d_BatchNorm_AvgPool_AvgPool.py", None, "2 pooling ops"),
        ("synthetic/functional", FUNCTIONAL, "functional avg_pool2d"),
        ("synthetic/unbatched", UNBATCHED, "3-d input"),
        ("synthetic/read_twice", READ_TWICE, "mean"),
    ],
)
def test_pool_rejects_with_a_reason(rel: str, source: str | None, reason: str) -> None:
    verdict = applies(KEY, task(rel, source))
    assert not verdict
    assert reason in verdict.reason, verdict.reason


def test_generated_pool_source_has_header_and_reads_the_module() -> None:
    view = task_view(task("level1/46_Average_Pooling_3D.py"))
    source = default_recipes()[KEY].emit(view, KernelConfig(block=512, num_warps=8))
    header = parse_header(source)
    assert header is not None and header.recipe == KEY and header.config.block == 512
    assert "BLOCK_AVG_POOL3D = 512" in source and "NUM_WARPS_AVG_POOL3D = 8" in source
    assert "return avg_pool3d(x, self.avg_pool)" in source
    assert "COUNT_INCLUDE_PAD=bool(pool.count_include_pad)" in source
    assert "int(pool.divisor_override or 0)" in source
