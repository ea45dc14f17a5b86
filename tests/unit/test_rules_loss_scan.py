"""The loss (full reduction) and scan recipes and the analysis they need: accepted, rejected and why (no kernels)."""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.model import Task
from htam_graph.rules import applies
from htam_graph.rules.analysis import analyse_source
from htam_graph.rules.base import NotApplicable
from htam_graph.rules.generator import task_view
from htam_graph.rules.ops import AttrScalar, Const, OpKind
from htam_graph.rules.recipes import default_recipes
from htam_graph.rules.recipes.losses.plan import COL, FULL, ROW, plan_loss
from htam_graph.rules.recipes.scans.block_scan import plan_scan

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
LOSS = "fusion.pointwise_into_reduction"
SCAN = "reduction_structure.block_scan"


def task(source: str, key: str = "synthetic") -> Task:
    return Task(key=key, suite="x", level=None, name=key, source=source, source_sha256="0" * 64)


def kb_task(rel: str) -> Task:
    return task((KB / rel).read_text(encoding="utf-8"), rel)


def two_inputs(
    forward: str, a: str = "torch.rand(6, 10)", b: str = "torch.rand(6, 10)", init: str = ""
) -> Task:
    return task(
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass Model(nn.Module):\n"
        f"    def __init__(self):\n        super().__init__()\n{init}\n"
        f"    def forward(self, a, b):\n        return {forward}\n\n\n"
        f"def get_inputs():\n    return [{a}, {b}]\n\n\ndef get_init_inputs():\n    return []\n"
    )


def one_input(forward: str, x: str = "torch.rand(4, 6, 10)", dim: int = 1) -> Task:
    return task(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def __init__(self, dim):\n        super().__init__()\n        self.dim = dim\n\n"
        f"    def forward(self, x):\n        return {forward}\n\n\n"
        f"def get_inputs():\n    return [{x}]\n\n\ndef get_init_inputs():\n    return [{dim}]\n"
    )


# ------------------------------------------------------------------------------------------- analysis
def test_full_mean_is_a_total_and_losses_keep_their_reduction() -> None:
    graph = analyse_source(two_inputs("torch.mean((a - b) ** 2)").source)
    assert [(n.op, n.kind) for n in graph.nodes][-1] == ("mean", OpKind.TOTAL)
    kl = analyse_source(two_inputs("F.kl_div(torch.log(a), b, reduction='batchmean')").source).nodes[-1]
    assert kl.kind is OpKind.LOSS and kl.param("reduction") == Const("batchmean")
    assert kl.param("log_target") == Const(False)


def test_scan_dims_from_attributes_and_the_structural_ops_of_an_exclusive_scan() -> None:
    graph = analyse_source(one_input("torch.cumprod(x, dim=self.dim)").source)
    assert graph.nodes[0].kind is OpKind.SCAN and graph.nodes[0].param("dim") == AttrScalar("dim", 1)
    graph = analyse_source(kb_task("level1/92_cumsum_exclusive.py").source)
    assert graph is not None
    assert [n.op for n in graph.nodes] == [
        "size", "int_sub", "narrow", "cumsum", "select", "unsqueeze", "zeros_like", "cat",
    ]  # fmt: skip
    assert graph.nodes[1].kind is OpKind.STRUCTURAL and graph.nodes[1].dtype == "int"


@pytest.mark.parametrize(
    ("forward", "reason"),
    [
        ("torch.prod(a * b)", "full reduction"),
        ("torch.mean(a, dim=None, keepdim=True)", "keepdim"),
        ("F.mse_loss(a, b, reduction='batchmean')", "reduction"),
        ("F.mse_loss(a, b, reduce=False)", "reduce"),
        ("F.mse_loss(a, b, weight=b)", "weight"),
    ],
)
def test_unsupported_loss_forms_are_rejected_by_the_analysis(forward: str, reason: str) -> None:
    with pytest.raises(NotApplicable, match=reason):
        analyse_source(two_inputs(forward).source)


# ------------------------------------------------------------------------------------------- loss recipe
@pytest.mark.parametrize(
    "rel",
    ["level1/94_MSELoss.py", "level1/96_HuberLoss.py", "level1/98_KLDivLoss.py", "level1/100_HingeLoss.py"],
)
def test_loss_recipe_applies_to_the_dev_losses(rel: str) -> None:
    assert applies(LOSS, kb_task(rel))
    assert not applies(SCAN, kb_task(rel))


def test_hinge_targets_are_read_as_columns_and_kl_divides_by_the_batch() -> None:
    hinge = plan_loss(task_view(kb_task("level1/100_HingeLoss.py")).graph)
    assert [(leaf.arg, leaf.space) for leaf in hinge.leaves] == [("predictions", FULL), ("targets", COL)]
    assert hinge.split == 1 and hinge.divisor == "numel"
    kl = plan_loss(task_view(kb_task("level1/98_KLDivLoss.py")).graph)
    assert kl.split == 0 and kl.divisor == "rows0" and [n.op for n in kl.pre] == ["log"]


def test_row_and_scalar_broadcasts_are_planned_without_division() -> None:
    plan = plan_loss(task_view(two_inputs("torch.sum(a * b)", b="torch.rand(6, 1)")).graph)
    assert [leaf.space for leaf in plan.leaves] == [FULL, ROW] and plan.divisor == "one"


@pytest.mark.parametrize(
    ("forward", "b", "reason"),
    [
        ("F.mse_loss(a, b, reduction='none')", "torch.rand(6, 10)", "reduction='none'"),
        ("torch.mean(a, dim=1)", "torch.rand(6, 10)", "does not end in a sum/mean"),
        ("torch.mean(torch.softmax(a, dim=1) * b)", "torch.rand(6, 10)", "not elementwise"),
        ("torch.mean(a * b)", "torch.rand(5, 6, 1)", "rows, columns or one element"),
        ("torch.sum(a * b)", "torch.rand(6, 10).half()", "different float dtypes"),
        ("torch.sum(a > b)", "torch.rand(6, 10)", "result dtype torch.int64"),
    ],
)
def test_loss_recipe_rejections_say_why(forward: str, b: str, reason: str) -> None:
    verdict = applies(LOSS, two_inputs(forward, a="torch.rand(6, 10)", b=b))
    assert not verdict and reason in verdict.reason, verdict.reason


# ------------------------------------------------------------------------------------------- scan recipe
def test_scan_recipe_applies_to_cumprod_and_proves_the_exclusive_cumsum() -> None:
    cumprod = plan_scan(task_view(kb_task("level1/90_cumprod.py")).graph)
    assert (cumprod.op, cumprod.exclusive, cumprod.dim) == ("cumprod", False, AttrScalar("dim", 1))
    exclusive = plan_scan(task_view(kb_task("level1/92_cumsum_exclusive.py")).graph)
    assert (exclusive.op, exclusive.exclusive, exclusive.source) == ("cumsum", True, "x")
    for rel in ("level1/90_cumprod.py", "level1/92_cumsum_exclusive.py"):
        assert applies(SCAN, kb_task(rel)) and not applies(LOSS, kb_task(rel))


_EXCLUSIVE = "torch.cat((torch.zeros_like(x.select({d}, 0).unsqueeze({d})), torch.cumsum(x.narrow({d}, {start}, x.size({d}) - {minus}), {d})), {d})"


@pytest.mark.parametrize(
    ("forward", "reason"),
    [
        ("torch.cumsum(x, 1) * 2", "neither the exclusive"),
        ("torch.cumsum(torch.cumsum(x, 1), 1)", "exactly one"),
        ("torch.cumsum(x.flip(1), 1)", "flip before cumsum is not elementwise"),
        ("torch.cumsum(x.flip(1), 1).flip(2)", "not along the scan dim"),
        ("torch.cumsum(torch.flip(x, (1, 2)), 1).flip(1)", "not along the scan dim"),
        ("torch.cumsum(x.flip(1) * 2, 1).flip(1)", "exactly flip(scan(flip"),
        (_EXCLUSIVE.format(d=1, start=1, minus=1), "narrow(dim, 0"),
        (_EXCLUSIVE.format(d=1, start=0, minus=2), "size(dim) - 1"),
        (_EXCLUSIVE.replace("zeros_like", "ones_like").format(d=1, start=0, minus=1), "ones_like"),
        ("torch.cat((torch.zeros_like(x.select(1, 0).unsqueeze(1)), torch.cumsum(x.narrow(1, 0, x.size(1) - 1), 2)), 1)", "cumsum along cat's dim"),
        ("torch.cumsum(x.long(), 1)", "long"),
    ],
)  # fmt: skip
def test_scan_rejections_say_why(forward: str, reason: str) -> None:
    verdict = applies(SCAN, one_input(forward))
    assert not verdict and reason in verdict.reason, verdict.reason


def test_an_elementwise_prologue_on_same_shaped_inputs_is_fused_into_the_scan() -> None:
    source = one_input("torch.cumsum(x * 2.0, self.dim)").source.replace(
        "def forward(self, x)", "def forward(self, x, m)"
    )
    source = source.replace(
        "return [torch.rand(4, 6, 10)]", "return [torch.rand(4, 6, 10), torch.rand(4, 6, 10) > 0.5]"
    )
    plan = plan_scan(task_view(task(source.replace("x * 2.0", "x * m"))).graph)
    assert plan.leaves == ("x", "m") and [n.op for n in plan.pre] == ["mul"]
    verdict = applies(SCAN, task(source.replace("x * 2.0", "x * m[0]")))
    assert not verdict
    verdict = applies(SCAN, one_input("torch.cumsum(x * self.dim, self.dim)"))
    assert not verdict and "module attribute" in verdict.reason, verdict.reason


def test_reverse_scan_is_proved_from_the_flips() -> None:
    plan = plan_scan(task_view(one_input("torch.cumsum(x.flip(self.dim), self.dim).flip(self.dim)")).graph)
    assert plan.reverse and not plan.exclusive and plan.dim == AttrScalar("dim", 1)
    plan = plan_scan(task_view(one_input("torch.flip(torch.cumprod(torch.flip(x, [0]), 0), [0])")).graph)
    assert plan.reverse and plan.op == "cumprod" and plan.name == "reverse_cumprod"


def test_exclusive_scan_along_a_negative_or_leading_dim_is_proved() -> None:
    for d in (0, -1, -2):
        plan = plan_scan(task_view(one_input(_EXCLUSIVE.format(d=d, start=0, minus=1))).graph)
        assert plan.exclusive and plan.dim == Const(d)


def test_generated_sources_are_standalone_and_name_their_recipe() -> None:
    loss = default_recipes()[LOSS]
    source = loss.emit(task_view(two_inputs("F.smooth_l1_loss(a, b, beta=0.5)")), loss.default_config)  # type: ignore[arg-type]
    assert (
        source.startswith('# htam-rules: {"config"')
        and '"recipe": "fusion.pointwise_into_reduction"' in source
    )
    assert "tl.atomic" not in source and "fused_smooth_l1_loss_finish_kernel" in source
    compile(source, "<generated>", "exec")
    scan = default_recipes()[SCAN]
    source = scan.emit(task_view(one_input("torch.cumprod(x, dim=self.dim)")), scan.default_config)  # type: ignore[arg-type]
    assert "return cumprod(x, int(self.dim))" in source and "tl.associative_scan" in source
    compile(source, "<generated>", "exec")


def test_loss_kernel_is_tuned_over_tile_size_warps_and_program_count() -> None:
    """block_size_tuning applies to the loss kernel; each ladder entry writes its own MAX_PARTIALS constant."""
    from htam_graph.rules import KernelConfig, RulesGenerator
    from htam_graph.rules.autotune import space_for
    from htam_graph.rules.recipes.tuning import LOSS_LADDER

    mse = kb_task("level1/94_MSELoss.py")
    assert "parallelism.block_size_tuning" in RulesGenerator().recipes_for(mse)
    space = space_for(LOSS)
    assert space[0] == KernelConfig(block=4096, num_warps=8) and set(LOSS_LADDER) <= set(space)
    loss = default_recipes()[LOSS]
    partials = set()
    for config in (loss.default_config, *LOSS_LADDER):
        source = loss.emit(task_view(mse), config)
        line = next(x for x in source.splitlines() if x.startswith("MAX_PARTIALS = "))
        assert int(line.split()[2]) == config.max_single_block // 8
        assert f"BLOCK = {config.block} " in source and f"NUM_WARPS = {config.num_warps}" in source
        partials.add(int(line.split()[2]))
    assert partials == {1024, 2048, 4096}
