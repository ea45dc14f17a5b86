"""The norm / reduction / softmax-over-dim recipes: what they accept, what they reject and why (no kernels run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.model import Task
from htam_graph.rules import applies
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
NORM = "reduction_structure.single_pass_norm"
DIM = "reduction_structure.dim_reduction"
LSE = "reduction_structure.online_logsumexp"


def task(source: str, key: str = "synthetic") -> Task:
    return Task(key=key, suite="x", level=None, name=key, source=source, source_sha256="0" * 64)


def kb_task(rel: str) -> Task:
    return task((KB / rel).read_text(encoding="utf-8"), rel)


def synthetic(init: str, forward: str, inputs: str = "torch.randn(2, 6, 5, 4)", init_args: str = "") -> Task:
    return task(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        f"    def __init__(self):\n        super().__init__()\n{init}\n"
        f"    def forward(self, x):\n{forward}\n\n\n"
        f"def get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return [{init_args}]\n"
    )


@pytest.mark.parametrize(
    ("rel", "key", "reason"),
    [
        ("level1/48_Mean_reduction_over_a_dimension.py", NORM, "not a normalisation"),
        ("level1/36_RMSNorm_.py", DIM, "broadcast back"),
        ("level1/40_LayerNorm.py", LSE, "not logsumexp"),
        ("level2/92_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp.py", NORM, "exactly one"),
        ("level2/44_ConvTranspose2d_Multiply_GlobalAvgPool_GlobalAvgPool_Mean.py", DIM, "exactly one"),
        ("level2/10_ConvTranspose2d_MaxPool_Hardtanh_Mean_Tanh.py", DIM, "max_pool2d"),
        ("level1/26_GELU_.py", LSE, "found: none"),
    ],
)
def test_dev_tasks_are_rejected_with_a_reason(rel: str, key: str, reason: str) -> None:
    verdict = applies(key, kb_task(rel))
    assert not verdict and reason in verdict.reason


@pytest.mark.parametrize(
    ("init", "forward", "key", "reason"),
    [
        (
            "        self.n = nn.InstanceNorm2d(6, track_running_stats=True)",
            "        return self.n(x)",
            NORM,
            "running",
        ),
        ("        pass", "        return torch.sum(x, dim=(1, 3))", DIM, "non-adjacent"),
        ("        pass", "        return torch.argmax(x, dim=1) + 1", DIM, "integer indices"),
        ("        pass", "        return torch.logsumexp(x, dim=1, keepdim=True) - x", LSE, "broadcast back"),
        ("        pass", "        return torch.sum(x.double(), dim=1)", DIM, "double"),
    ],
)
def test_unsupported_combinations_are_not_applicable(init: str, forward: str, key: str, reason: str) -> None:
    verdict = applies(key, synthetic(init, forward))
    assert not verdict and reason in verdict.reason, verdict.reason


def test_a_reduction_without_keepdim_broadcast_back_is_not_applicable() -> None:
    # (4, 4) / sum over dim 0 -> (4,): broadcasts against the LAST dim, not back over the reduced one
    verdict = applies(
        NORM, synthetic("        pass", "        return x / torch.sum(x, dim=0)", "torch.randn(4, 4)")
    )
    assert not verdict and "keepdim" in verdict.reason, verdict.reason


@pytest.mark.parametrize(
    ("forward", "key"),
    [
        ("        return torch.softmax(x * 2.0, dim=1) * 3.0", LSE),
        ("        return torch.amax(torch.relu(x), dim=(2, 3), keepdim=True)", DIM),
        ("        return torch.prod(x, dim=-1)", DIM),
        ("        return x - torch.mean(x, dim=2, keepdim=True)", NORM),
    ],
)
def test_any_dim_variants_apply_and_emit_standalone_code(forward: str, key: str) -> None:
    t = synthetic("        pass", forward)
    assert applies(key, t)
    source = default_recipes()[key].emit(task_view(t), default_recipes()[key].default_config)  # type: ignore[arg-type]
    assert "@triton.jit" in source and "class ModelNew" in source
    for size in ("6", "5", "4"):  # sizes are read from the tensors at run time
        assert f"= {size}\n" not in source and f", {size})" not in source
