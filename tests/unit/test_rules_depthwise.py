"""data_reuse.depthwise_conv_direct: what it accepts, what it rejects and why, and what it writes (no kernels
run here; tests/integration/test_rules_depthwise_interpreter.py and the GPU test run them)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from htam_graph.kernels_runtime.static_checks import analyse as static_analyse
from htam_graph.model import PrecisionPolicy, Task
from htam_graph.rules import KernelConfig, applies
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import base_recipes, default_recipes
from htam_graph.rules.recipes.tuning import BLOCK_SIZE_TUNING, DEPTHWISE_LADDER, TuningRecipe
from htam_graph.seed import load_seed

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
KEY = "data_reuse.depthwise_conv_direct"
APPLIES = {
    "level1/82_conv_depthwise_2D_square_input_square_kernel.py",
    "level1/84_conv_depthwise_2D_asymmetric_input_square_kernel.py",
    "level1/86_conv_depthwise_separable_2D.py",
}


def task(source: str, key: str = "synthetic") -> Task:
    return Task(key=key, suite="x", level=None, name=key, source=source, source_sha256="0" * 64)


def kb_task(rel: str) -> Task:
    return task((KB / rel).read_text(encoding="utf-8"), rel)


def synthetic(init: str, forward: str, inputs: str = "torch.randn(2, 4, 9, 9)", args: str = "x") -> Task:
    return task(
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass Model(nn.Module):\n"
        f"    def __init__(self):\n        super().__init__()\n{init}\n"
        f"    def forward(self, {args}):\n{forward}\n\n\n"
        f"def get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return []\n"
    )


def emit(t: Task, config: KernelConfig | None = None) -> str:
    recipe = base_recipes()[KEY]
    return recipe.emit(task_view(t), config or recipe.default_config)


def method(source: str, cls: str, name: str) -> str:
    tree = ast.parse(source)
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return ast.unparse(next(f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == name))


def kernel_text(source: str) -> str:
    tree = ast.parse(source)
    kernel = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.endswith("_kernel"))
    return ast.unparse(kernel)


def test_the_recipe_is_registered_after_the_existing_ones_under_a_seed_local() -> None:
    keys = list(base_recipes())
    assert keys.index(KEY) > keys.index("fusion.conv_reduction_epilogue")  # appended: the order is kept
    local = next(lc for lc in load_seed().locals if lc.key == KEY)
    assert local.global_key == "data_reuse" and "conv" in local.op_tags


def test_the_tuning_recipe_offers_the_depthwise_ladder() -> None:
    tuning = default_recipes()[BLOCK_SIZE_TUNING]
    assert isinstance(tuning, TuningRecipe)
    assert tuning.ladders[KEY] == DEPTHWISE_LADDER and len(set(DEPTHWISE_LADDER)) == len(DEPTHWISE_LADDER)


def test_coverage_of_the_dev_split() -> None:
    found = set()
    for path in sorted([*KB.glob("level1/*.py"), *KB.glob("level2/*.py")]):
        rel = str(path.relative_to(KB))
        if applies(KEY, kb_task(rel)):
            found.add(rel)
    assert found == APPLIES


@pytest.mark.parametrize(
    ("rel", "reason"),
    [
        ("level1/54_conv_standard_3D__square_input__square_kernel.py", "only 1D and 2D"),
        (
            "level1/50_conv_standard_2D__square_input__square_kernel.py",
            "ordinary convolution (groups=1, 3 input channels), not depthwise",
        ),
        ("level1/76_conv_standard_1D_dilated_strided__.py", "ordinary convolution (groups=1"),
        (
            "level1/78_conv_transposed_2D_asymmetric_input_asymmetric_kernel___padded__.py",
            "conv_transpose2d is a transposed convolution",
        ),
        (
            "level1/72_conv_transposed_3D_asymmetric_input_asymmetric_kernel___strided_padded_grouped_.py",
            "transposed convolution",
        ),
        ("level2/4_Conv2d_Mish_Mish.py", "ordinary convolution"),
        ("level1/2_Standard_matrix_multiplication_.py", "not a convolution"),
        ("level1/20_LeakyReLU.py", "does not start with a convolution"),
    ],
)
def test_dev_tasks_are_rejected_with_a_reason(rel: str, reason: str) -> None:
    if not (KB / rel).is_file():
        pytest.skip(f"{rel} is not in this checkout")
    verdict = applies(KEY, kb_task(rel))
    assert not verdict and reason in verdict.reason, verdict.reason


@pytest.mark.parametrize(
    ("init", "forward", "reason"),
    [
        (
            "        self.c = nn.Conv2d(4, 8, 3, groups=2)",
            "        return self.c(x)",
            "grouped convolution with 2 input channels per group",
        ),
        (
            "        self.c = nn.Conv2d(4, 4, 3, padding=1, groups=4, padding_mode='reflect')",
            "        return self.c(x)",
            "padding_mode='reflect'",
        ),
        (
            "        self.c = nn.ConvTranspose2d(4, 4, 3, groups=4)",
            "        return self.c(x)",
            "transposed convolution",
        ),
        (
            "        self.c = nn.Conv3d(4, 4, 3, groups=4)",
            "        return self.c(x)",
            "only 1D and 2D",
        ),
        (
            "        self.c = nn.Conv2d(4, 4, 3, groups=4)\n        self.p = nn.Conv2d(4, 4, 1)",
            "        y = self.c(x)\n        return self.p(y) + y",
            "used by several ops",
        ),
        (
            "        self.c = nn.Conv2d(4, 4, 3, groups=4)\n        self.p = nn.Conv2d(4, 4, 1)",
            "        return torch.relu(self.p(self.c(x)))",
            "neither fused nor a library call",
        ),
        (
            "        self.c = nn.Conv2d(4, 4, 3, groups=4)",
            "        return self.c(torch.relu(x))",
            "does not start with a convolution",
        ),
        (
            "        self.c = nn.Conv2d(4, 4, 3, groups=4)",
            "        return self.c(x).sum(dim=1)",
            "neither fused nor a library call",
        ),
        (
            "        self.c = nn.Conv2d(4, 4, 3, padding=1, groups=4)\n        self.t = nn.Parameter(torch.randn(7))",
            "        return self.c(x) * self.t",
            "neither per-channel nor one element",
        ),
        (
            "        self.c = nn.Conv2d(4, 4, 13, groups=4)",
            "        return self.c(x)",
            "169 taps per output",
        ),
        (
            "        self.seq = nn.Sequential(nn.Conv2d(4, 4, 3, groups=4))",
            "        return self.seq(x)",
            "indexed container",
        ),
    ],
    ids=[
        "grouped",
        "reflect_padding",
        "transposed",
        "conv3d",
        "conv_output_reused",
        "op_after_library_tail",
        "prologue",
        "reduction_epilogue",
        "broadcast_along_width",
        "too_many_taps",
        "sequential",
    ],
)
def test_synthetic_forwards_are_rejected(init: str, forward: str, reason: str) -> None:
    inputs = "torch.randn(2, 4, 20, 7)" if "13" not in init else "torch.randn(2, 4, 20, 20)"
    if "Conv3d" in init:
        inputs = "torch.randn(2, 4, 5, 6, 7)"
    verdict = applies(KEY, synthetic(init, forward, inputs=inputs))
    assert not verdict and reason in verdict.reason, verdict.reason


def test_depthwise_separable_replaces_only_the_depthwise_conv() -> None:
    source = emit(kb_task("level1/86_conv_depthwise_separable_2D.py"))
    report = static_analyse(source, PrecisionPolicy.FP32_STRICT, require_kernel=True)
    assert report.syntax_error is None and report.violations == []
    assert "allow_tf32" not in source  # precision is never touched
    lines = [line.strip() for line in method(source, "ModelNew", "forward").splitlines()[1:]]
    assert lines == [
        "y = depthwise_conv2d(x, self.depthwise.weight, self.depthwise.bias, self.depthwise.stride,"
        " self.depthwise.padding, self.depthwise.dilation, self.depthwise.groups, self.depthwise.padding_mode)",
        "y = self.pointwise(y)",
        "return y",
    ]


def test_the_kernel_decomposes_once_per_program_and_unrolls_the_taps() -> None:
    source = emit(kb_task("level1/82_conv_depthwise_2D_square_input_square_kernel.py"))
    kernel = kernel_text(source)
    ops = [type(n.op) for n in ast.walk(ast.parse(kernel)) if isinstance(n, ast.BinOp)]
    # the only divisions: (n, c, row block) from program_id 0, and the input channel co // MULT (scalars)
    assert ops.count(ast.FloorDiv) == 3 and ops.count(ast.Mod) == 2
    assert "tl.static_range(KH)" in kernel and "tl.static_range(KW)" in kernel
    assert "acc = tl.zeros((BLOCK_H, BLOCK_W), dtype=tl.float32)" in kernel
    assert kernel.count("tl.store(") == 1
    assert "grid = (n_images * c_out * n_h_blocks, n_w_blocks)" in source


def test_an_epilogue_is_fused_with_per_channel_and_scalar_operands_read_as_scalars() -> None:
    t = synthetic(
        "        self.c = nn.Conv2d(4, 4, 3, padding=1, groups=4)\n"
        "        self.scale = nn.Parameter(torch.randn(4, 1, 1))\n        self.k = 0.5",
        "        return torch.tanh(self.c(x) * self.scale) * self.k + x",
    )
    source = emit(t)
    kernel = kernel_text(source)
    assert "tl.load(ep_scale_ptr + co)" in kernel
    assert "tl.load(ep_x_ptr + out_offs, mask=out_mask, other=0.0)" in kernel
    forward = method(source, "ModelNew", "forward")
    assert "self.scale, x, float(self.k)" in forward
    assert forward.rstrip().splitlines()[-1].strip() == "return y"


def test_functional_conv_passes_the_call_parameters() -> None:
    t = synthetic(
        "        self.w = nn.Parameter(torch.randn(8, 1, 3, 3))",
        "        return F.conv2d(x, self.w, None, 2, 1, 1, 4)",
    )
    forward = method(emit(t), "ModelNew", "forward")
    assert "depthwise_conv2d(x, self.w, None, 2, 1, 1, 4, 'zeros')" in forward


def test_conv1d_is_written_as_planes_of_height_one() -> None:
    t = synthetic(
        "        self.c = nn.Conv1d(6, 6, 5, stride=2, groups=6)",
        "        return self.c(x)",
        inputs="torch.randn(2, 6, 40)",
    )
    source = emit(t)
    assert "def depthwise_conv1d(" in source and "nd = 1" in source
    assert "(1, *kernel), (1, *stride), (0, *pads), (1, *dilation)" in source


def test_tile_constants_follow_the_config() -> None:
    t = synthetic("        self.c = nn.Conv2d(4, 4, 3, groups=4)", "        return self.c(x)")
    source = emit(t, KernelConfig(block=2048, num_warps=8))
    assert "BLOCK_DEPTHWISE_CONV2D = 2048" in source and "NUM_WARPS_DEPTHWISE_CONV2D = 8" in source
