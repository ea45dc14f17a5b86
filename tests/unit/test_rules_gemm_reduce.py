"""Applicability of the GEMM + row-reduction recipes (yes / no with the reason) and the analysis they need."""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.model import Task
from htam_graph.rules import RulesGenerator
from htam_graph.rules.analysis import analyse_source
from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import OpKind

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
ROW = "fusion.reduction_with_epilogue"
GEMV = "algebraic_rewrite.reduce_before_linear"


def task_of(rel: str) -> Task:
    source = (KB / rel).read_text(encoding="utf-8")
    return Task(
        key=f"kb/{rel}", suite="kernelbench", level=None, name=rel, source=source, source_sha256="0" * 64
    )


def synthetic(
    forward: str, init: str = "self.linear = nn.Linear(24, 40)", inputs: str = "torch.rand(5, 24)"
) -> Task:
    """A task whose __init__ / forward bodies are `init` / `forward` (lines separated by newlines)."""
    body = "\n".join(f"        {line.strip()}" for line in forward.splitlines())
    members = "\n".join(f"        {line.strip()}" for line in init.splitlines())
    source = (
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        f"    def __init__(self):\n        super().__init__()\n{members}\n\n"
        f"    def forward(self, x):\n{body}\n\n\n"
        f"def get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    return Task(
        key="synthetic", suite="test", level=None, name="synthetic", source=source, source_sha256="1" * 64
    )


DEV = [
    "level2/14_Gemm_Divide_Sum_Scaling.py",
    "level2/18_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp.py",
    "level2/28_BMM_InstanceNorm_Sum_ResidualAdd_Multiply.py",
    "level2/66_Matmul_Dropout_Softmax.py",
    "level2/80_Gemm_Max_Subtract_GELU.py",
    "level2/84_Gemm_BatchNorm_Scaling_Softmax.py",
    "level2/98_Matmul_AvgPool_GELU_Scale_Max.py",
]


@pytest.mark.parametrize("rel", DEV, ids=[r.split("/")[1][:2] for r in DEV])
def test_row_recipe_applies_to_the_dev_tasks(rel: str) -> None:
    verdict = RulesGenerator().applies(ROW, task_of(rel))
    assert verdict, verdict.reason


@pytest.mark.parametrize(
    ("rel", "reason"),
    [
        ("level2/76_Gemm_Add_ReLU.py", "no reduction"),
        ("level2/62_Matmul_GroupNorm_LeakyReLU_Sum.py", "nn_group_norm"),
        ("level2/54_Conv2d_Multiply_LeakyReLU_GELU.py", "linear / matmul"),
    ],
)
def test_row_recipe_rejects_with_reason(rel: str, reason: str) -> None:
    verdict = RulesGenerator().applies(ROW, task_of(rel))
    assert not verdict and reason in verdict.reason


def test_rewrite_applies_only_to_linear_module_reductions() -> None:
    generator = RulesGenerator()
    assert generator.applies(GEMV, task_of(DEV[1]))  # sum over the features of nn.Linear
    assert generator.applies(GEMV, task_of(DEV[6]))  # avg_pool1d over the features of nn.Linear
    raw = generator.applies(GEMV, task_of(DEV[0]))  # randn weights: accuracy not provable at 1e-4
    assert not raw and "nn.Linear" in raw.reason
    for rel, reason in [(DEV[3], "dropout"), (DEV[5], "nn_batch_norm"), (DEV[4], "amax")]:
        verdict = generator.applies(GEMV, task_of(rel))
        assert not verdict and reason in verdict.reason, verdict.reason


@pytest.mark.parametrize(
    ("forward", "reason"),
    [
        ("return torch.sum(self.linear(x), dim=0)", "batch dim"),
        ("return torch.softmax(self.linear(x), dim=0)", "not over the features"),
        (
            "y = self.linear(x)\n        return torch.softmax(self.drop(y * 2), dim=1)",
            "directly on the library output",
        ),
        ("return torch.argmax(self.linear(x), dim=1)", "float32 only"),
        ("return torch.prod(self.linear(x), dim=1)", "is not one of"),
        ("y = self.linear(x)\nreturn torch.softmax(y.unsqueeze(1) + y, dim=2)", "broadcasts its operands"),
        ("y = self.linear(x)\nreturn y.sum(dim=1, keepdim=True) + x", "broadcasts its operands"),
    ],
)
def test_row_recipe_rejects_synthetic_forms(forward: str, reason: str) -> None:
    init = "self.linear = nn.Linear(24, 40)\n        self.drop = nn.Dropout(0.5)"
    verdict = RulesGenerator().applies(ROW, synthetic(forward, init))
    assert not verdict and reason in verdict.reason, verdict.reason


def test_rewrite_rejects_a_nonlinearity_before_the_sum() -> None:
    verdict = RulesGenerator().applies(GEMV, synthetic("return torch.relu(self.linear(x)).sum(dim=1)"))
    assert not verdict and "not a scaling" in verdict.reason
    scaled = RulesGenerator().applies(
        GEMV, synthetic("return (self.linear(x) / 3).mean(dim=1, keepdim=True)")
    )
    assert scaled, scaled.reason


def test_analysis_normalises_values_transpose_squeeze_dropout_batch_norm() -> None:
    names = {n.op: n for rel in DEV for n in analyse_source(task_of(rel).source).nodes}
    assert names["t"].kind is OpKind.LAYOUT  # self.weight.T
    assert names["amax"].kind is OpKind.REDUCTION  # torch.max(x, dim).values and [0]
    assert names["squeeze"].kind is OpKind.LAYOUT
    assert names["dropout"].kind is OpKind.RANDOM  # never an identity by default
    assert names["nn_batch_norm"].kind is OpKind.NORM


def test_analysis_rejects_max_used_as_a_tuple() -> None:
    task = synthetic("v, i = torch.max(self.linear(x), dim=1)\n        return v + i")
    with pytest.raises(NotApplicable, match="tuple"):
        analyse_source(task.source)


def test_dropout_is_kept_when_active() -> None:
    generator = RulesGenerator()
    task = task_of(DEV[3])
    from htam_graph.rules.generator import task_view
    from htam_graph.rules.recipes import default_recipes

    recipe = default_recipes()[ROW]
    source = recipe.emit(task_view(task), recipe.default_config)  # type: ignore[arg-type]
    assert "if self.dropout.training and self.dropout.p > 0:" in source
    assert "torch.nn.functional.dropout(y, self.dropout.p, training=True)" in source
    assert ROW in generator.recipes_for(task)
