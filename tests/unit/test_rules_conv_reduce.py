"""fusion.conv_reduction_epilogue: what the analysis now understands, and what the recipe accepts / rejects
and why (no kernels run here; see tests/integration/test_rules_conv_reduce_*.py)."""

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
from htam_graph.rules.recipes.conv_reduce.plan import plan_conv_reduce

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
KEY = "fusion.conv_reduction_epilogue"

COVERED = [
    "6_Conv3d_Softmax_MaxPool_MaxPool",
    "8_Conv3d_Divide_Max_GlobalAvgPool_BiasAdd_Sum",
    "10_ConvTranspose2d_MaxPool_Hardtanh_Mean_Tanh",
    "24_Conv3d_Min_Softmax",
    "32_Conv2d_Scaling_Min",
    "36_ConvTranspose2d_Min_Sum_GELU_Add",
    "42_ConvTranspose2d_GlobalAvgPool_BiasAdd_LogSumExp_Sum_Multiply",
    "44_ConvTranspose2d_Multiply_GlobalAvgPool_GlobalAvgPool_Mean",
    "52_Conv2d_Activation_BatchNorm",
    "72_ConvTranspose3d_BatchNorm_AvgPool_AvgPool",
    "78_ConvTranspose3d_Max_Max_Sum",
    "92_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp",
    "96_ConvTranspose3d_Multiply_Max_GlobalAvgPool_Clamp",
]


def task(source: str, key: str = "synthetic") -> Task:
    return Task(key=key, suite="x", level=None, name=key, source=source, source_sha256="0" * 64)


def kb_task(rel: str) -> Task:
    return task((KB / rel).read_text(encoding="utf-8"), rel)


def conv_task(init: str, forward: str, channels: int = 6, nd: int = 2) -> Task:
    return task(conv_source(init, forward, channels, nd))


def conv_source(init: str, forward: str, channels: int = 6, nd: int = 2) -> str:
    spatial = ", ".join(["9"] * nd)
    return (
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        f"    def __init__(self):\n        super().__init__()\n"
        f"        self.conv = nn.Conv{nd}d(3, {channels}, 3)\n{init}\n"
        f"    def forward(self, x):\n        x = self.conv(x)\n{forward}\n\n\n"
        f"def get_inputs():\n    return [torch.randn(2, 3, {spatial})]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )


# ------------------------------------------------------------------------------------------- analysis
def test_min_over_a_dim_with_index_0_is_an_amin_reduction() -> None:
    graph = analyse_source(
        conv_source("        self.dim = 1", "        return torch.min(x, dim=self.dim, keepdim=True)[0]")
    )
    node = graph.nodes[-1]
    assert (node.kind, node.op) == (OpKind.REDUCTION, "amin")
    assert node.param("dim") == AttrScalar("dim", 1) and node.param("keepdim") == Const(True)
    assert graph.output.name == node.name and node.shape == (2, 1, 7, 7)
    method = analyse_source(conv_source("", "        return x.max(2)[0]")).nodes[-1]
    assert (method.op, method.param("dim"), method.shape) == ("amax", Const(2), (2, 6, 7))


def test_the_indices_of_min_over_a_dim_are_not_applicable() -> None:
    with pytest.raises(NotApplicable, match="not a tensor"):
        analyse_source(conv_source("", "        return torch.min(x, 1)[1]"))


def test_global_average_pool_is_a_mean_over_the_spatial_dims() -> None:
    graph = analyse_source(
        conv_source("        self.gap = nn.AdaptiveAvgPool3d((1, 1, 1))", "        return self.gap(x)", nd=3)
    )
    node = graph.nodes[-1]
    assert (node.kind, node.op, node.shape) == (OpKind.REDUCTION, "mean", (2, 6, 1, 1, 1))
    assert node.param("dim") == Const((-3, -2, -1)) and node.param("keepdim") == Const(True)
    node = analyse_source(
        conv_source("        self.gap = nn.AdaptiveAvgPool2d(2)", "        return self.gap(x)")
    ).nodes[-1]
    assert (node.kind, node.op, node.param("output_size")) == (
        OpKind.POOL,
        "adaptive_avg_pool2d",
        Const((2, 2)),
    )


def test_batch_norm_is_a_norm_module_with_its_attributes() -> None:
    graph = analyse_source(
        conv_source("        self.bn = nn.BatchNorm2d(6, momentum=0.3)", "        return self.bn(x)")
    )
    node = graph.nodes[-1]
    assert (node.kind, node.op) == (OpKind.NORM, "nn_batch_norm")
    assert node.param("momentum") == AttrScalar("bn.momentum", 0.3)
    assert node.param("track_running_stats") == Const(True)


# ------------------------------------------------------------------------------------------- recipe
@pytest.mark.parametrize("name", COVERED)
def test_dev_tasks_it_covers(name: str) -> None:
    verdict = applies(KEY, kb_task(f"level2/{name}.py"))
    assert verdict, verdict.reason


@pytest.mark.parametrize(
    ("rel", "reason"),
    [
        # a pool first; its spatial softmax is reduction_structure.online_logsumexp's
        ("level2/38_ConvTranspose3d_AvgPool_Clamp_Softmax_Multiply.py", "does not start with a convolution"),
        ("level2/4_Conv2d_Mish_Mish.py", "plain elementwise epilogue"),
        ("level1/26_GELU_.py", "does not start with a convolution"),
        ("level1/10_3D_tensor_matrix_multiplication.py", "does not start with a convolution"),
    ],
)
def test_dev_tasks_it_rejects_with_a_reason(rel: str, reason: str) -> None:
    verdict = applies(KEY, kb_task(rel))
    assert not verdict and reason in verdict.reason, verdict.reason


@pytest.mark.parametrize(
    ("init", "forward", "reason"),
    [
        (
            "        self.p = nn.MaxPool2d(2)\n        self.bn = nn.BatchNorm2d(6)",
            "        return self.bn(self.p(x))",
            "after a pool",
        ),
        ("", "        return torch.softmax(x, dim=2)", "only over the channel dim"),
        ("", "        return torch.sum(x, dim=(1, 2))", "channels and space"),
        (
            "        self.p = nn.MaxPool2d(1)",
            "        return self.p(torch.amax(x, dim=2, keepdim=True))",
            "after a reduction over part",
        ),
        (
            "        self.p = nn.MaxPool2d(1)",
            "        return self.p(self.p(self.p(x)))",
            "more than two pooling",
        ),
        (
            "        self.w = nn.Parameter(torch.randn(7, 7))",
            "        return torch.amax(x * self.w, dim=1)",
            "neither per-channel",
        ),
        ("", "        return torch.nn.functional.max_pool2d(x, 2).sum(dim=1)", "functional max_pool2d"),
        (
            "        self.p = nn.AdaptiveMaxPool2d(3)",
            "        return self.p(x).sum(dim=1)",
            "windows depend on the input's size",
        ),
        # cumulative-average batch norm reads num_batches_tracked as a number: not even traceable on meta
        (
            "        self.bn = nn.BatchNorm2d(6, momentum=None)",
            "        return self.bn(x).sum(dim=1)",
            "shape propagation",
        ),
        (
            "        self.gn = nn.GroupNorm(2, 6)\n        self.b = nn.Parameter(torch.randn(6, 1, 1))",
            "        return self.gn(x + self.b)",
            "before the norm",
        ),
        (
            "",
            "        y = torch.amax(x, dim=1)\n        return y + torch.amax(x, dim=1)",
            "does not read the current value",
        ),
        ("", "        return torch.relu(x)", "plain elementwise"),
    ],
)
def test_synthetic_chains_it_rejects(init: str, forward: str, reason: str) -> None:
    verdict = applies(KEY, conv_task(init, forward))
    assert not verdict and reason in verdict.reason, verdict.reason


def test_plan_labels_layouts_and_output_dims() -> None:
    plan = plan_conv_reduce(
        analyse_source(
            conv_source(
                "        self.p = nn.MaxPool2d(2)\n        self.b = nn.Parameter(torch.randn(6, 1, 1))",
                "        x = self.p(x)\n        x = torch.mean(x, dim=(2, 3), keepdim=True) + self.b\n"
                "        return torch.logsumexp(x, dim=1)",
            )
        )
    )
    assert [s.role for s in plan.steps] == ["pool", "spatial", "ew", "channel"]
    assert [s.layout for s in plan.steps] == ["tile", "tile", "plane", "plane"]
    assert plan.final_layout == "scalar" and plan.out_labels == ("n", "1", "1")
    assert [leaf.per_channel for leaf in plan.leaves] == [True]


def test_generated_source_reads_modules_at_run_time() -> None:
    view = task_view(kb_task("level2/72_ConvTranspose3d_BatchNorm_AvgPool_AvgPool.py"))
    recipe = default_recipes()[KEY]
    source = recipe.emit(view, recipe.default_config)  # type: ignore[arg-type]
    assert source.startswith('# htam-rules: {"config"') and KEY in source.splitlines()[0]
    assert "self.avg_pool1, self.avg_pool2" in source and "norm_statistics_" in source
    assert "norm.running_mean.lerp_" in source  # training mode updates the running statistics
    assert "y = self.conv_transpose(x)  # library op, unchanged" in source
    compile(source, "<generated>", "exec")


def test_a_reduction_over_some_spatial_dims_is_a_window_level() -> None:
    plan = plan_conv_reduce(
        analyse_source(
            conv_source(
                "",
                "        x = torch.amin(x, dim=1, keepdim=True)\n        return torch.sum(x, dim=3, keepdim=True) * 2.0",
                nd=3,
            )
        )
    )
    assert [s.role for s in plan.steps] == ["channel", "window", "ew"]
    assert [s.layout for s in plan.steps] == ["tile", "row", "row"]
    window = plan.pools[0]
    assert plan.window_dims(window) == (1,)  # the H dim of (D, H, W)
    assert plan.final_layout == "row" and plan.out_labels == ("n", "1", "s0", "1", "s2")


def test_a_window_spanning_reduced_dims_is_a_runtime_loop_and_pool_windows_stay_unrolled() -> None:
    """level2/36 sums H = 256 rows after the channel min: unrolling that loop made Triton compile for minutes
    on the H200 (its first evaluation timed out at 240 s in every bench). Small pool windows stay unrolled."""
    recipe = default_recipes()[KEY]
    spanning = recipe.emit(  # type: ignore[attr-defined]
        task_view(kb_task("level2/36_ConvTranspose2d_Min_Sum_GELU_Add.py")), recipe.default_config
    )
    assert "window spanning the reduced dims" in spanning
    assert "in range(K1H)" in spanning and "static_range" not in spanning
    pooled = recipe.emit(  # type: ignore[attr-defined]
        task_view(kb_task("level2/6_Conv3d_Softmax_MaxPool_MaxPool.py")), recipe.default_config
    )
    assert "in tl.static_range(K1H)" in pooled  # the first pool's window over the conv output
    assert "in range(K2H)" in pooled  # a pool over pooled values: a loop at run time, as before
