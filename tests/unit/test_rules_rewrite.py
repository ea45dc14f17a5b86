"""algebraic_rewrite.* recipes: where they apply in the dev split and why they do not elsewhere (no kernels run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.model import Language, Task
from htam_graph.rules import RulesGenerator, applies

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
DIAG = "algebraic_rewrite.diag_matmul_as_broadcast"
NOOPS = "algebraic_rewrite.drop_noops"


def task(rel: str, source: str | None = None) -> Task:
    text = source if source is not None else (KB / rel).read_text(encoding="utf-8")
    return Task(key=rel, suite="kernelbench", level=None, name=rel, source=text, source_sha256="0" * 64)


def test_rewrite_coverage_of_the_dev_split() -> None:
    generator = RulesGenerator()
    found: dict[str, set[str]] = {DIAG: set(), NOOPS: set()}
    for path in sorted([*KB.glob("level1/*.py"), *KB.glob("level2/*.py")]):
        rel = str(path.relative_to(KB))
        for key in generator.recipes_for(task(rel), "cuda", Language.TRITON):
            if key in found:
                found[key].add(rel)
    assert found[DIAG] == {"level1/12_Matmul_with_diagonal_matrices_.py"}
    assert found[NOOPS] == {
        "level2/20_ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd.py",
        "level2/40_Matmul_Scaling_ResidualAdd.py",
    }


def forward_source(body: str, inputs: str = "torch.randn(4, 5)") -> str:
    return f"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
{body}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
"""


IN_PLACE = forward_source("        y = x.clone()\n        x.mul_(2.0)\n        return x + y")
COPY_ONLY = forward_source("        return x.clone().detach()")
NO_COPY = forward_source("        return torch.relu(x)")
DIAG_SELF = forward_source("        return torch.diag(x) @ torch.diag(x)", "torch.randn(5)")
TWO_INPUTS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return EXPR


def get_inputs():
    return [torch.randn(4), torch.randn(SHAPE)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize(
    ("key", "rel", "source", "reason"),
    [
        (NOOPS, "synthetic/in_place", IN_PLACE, "writes in place"),
        (NOOPS, "synthetic/copy_only", COPY_ONLY, "nothing is computed"),
        (NOOPS, "synthetic/no_copy", NO_COPY, "no clone / detach / contiguous"),
        (NOOPS, "level2/66_Matmul_Dropout_Softmax.py", None, "Dropout"),
        (NOOPS, "level1/26_GELU_.py", None, "no clone"),
        (
            DIAG,
            "synthetic/unsqueeze_add",
            TWO_INPUTS.replace("EXPR", "a.unsqueeze(1) + b").replace("SHAPE", "4, 6"),
            "not a multiply",
        ),
        (
            DIAG,
            "synthetic/diag_offset",
            TWO_INPUTS.replace("EXPR", "torch.diag(a, 1) @ b").replace("SHAPE", "5, 3"),
            "offset diagonal",
        ),
        (DIAG, "synthetic/diag_self", DIAG_SELF, "not a diagonal-matrix product"),
        (DIAG, "level1/2_Standard_matrix_multiplication_.py", None, "not a diagonal-matrix product"),
    ],
)
def test_rewrites_reject_with_a_reason(key: str, rel: str, source: str | None, reason: str) -> None:
    verdict = applies(key, task(rel, source))
    assert not verdict
    assert reason in verdict.reason, verdict.reason


def test_block_size_tuning_reemits_rewrite_kernels_under_their_own_header() -> None:
    from htam_graph.model import GenerationRequest, GlobalDirection, LocalStrategy
    from htam_graph.rules import parse_header

    def request(t: Task, key: str, base: str = "") -> GenerationRequest:
        g = key.split(".")[0]
        return GenerationRequest(
            task=t,
            step=1,
            direction=GlobalDirection(key=g, name=g, intent=""),
            strategy=LocalStrategy(key=key, name=key, global_key=g, languages=[Language.TRITON], pattern=""),
            base_source=base,
            language=Language.TRITON,
            state_summary="",
        )

    generator = RulesGenerator()
    for rel, key in (
        ("level2/40_Matmul_Scaling_ResidualAdd.py", NOOPS),
        ("level1/12_Matmul_with_diagonal_matrices_.py", DIAG),
    ):
        t = task(rel)
        base = generator.generate(request(t, key)).source
        assert base is not None
        tuned = generator.generate(request(t, "parallelism.block_size_tuning", base)).source
        assert tuned is not None
        before, after = parse_header(base), parse_header(tuned)
        assert before is not None and after is not None
        assert after.recipe == key and after.config != before.config
