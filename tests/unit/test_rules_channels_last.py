"""library_offload.channels_last_conv: what it accepts, what it rejects and why, and what it writes (no kernels
run here; the interpreter and GPU tests run them)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from htam_graph.kernels_runtime.static_checks import analyse as static_analyse
from htam_graph.model import PrecisionPolicy, Task
from htam_graph.rules import applies
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import base_recipes
from htam_graph.seed import load_seed

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
KEY = "library_offload.channels_last_conv"
# level1/level2 dev tasks whose forward is 2D/3D convs followed by nothing or an elementwise epilogue
APPLIES = {
    "level1/50_conv_standard_2D__square_input__square_kernel.py",
    "level1/54_conv_standard_3D__square_input__square_kernel.py",
    "level1/56_conv_standard_2D__asymmetric_input__asymmetric_kernel.py",
    "level1/58_conv_transposed_3D__asymmetric_input__asymmetric_kernel.py",
    "level1/60_conv_standard_3D__square_input__asymmetric_kernel.py",
    "level1/62_conv_standard_2D__square_input__asymmetric_kernel.py",
    "level1/66_conv_standard_3D__asymmetric_input__asymmetric_kernel.py",
    "level1/68_conv_transposed_3D__square_input__asymmetric_kernel.py",
    "level1/70_conv_transposed_3D__asymmetric_input__square_kernel.py",
    "level1/72_conv_transposed_3D_asymmetric_input_asymmetric_kernel___strided_padded_grouped_.py",
    "level1/78_conv_transposed_2D_asymmetric_input_asymmetric_kernel___padded__.py",
    "level1/80_conv_standard_2D_square_input_asymmetric_kernel___dilated____padded__.py",
    "level1/82_conv_depthwise_2D_square_input_square_kernel.py",
    "level1/84_conv_depthwise_2D_asymmetric_input_square_kernel.py",
    "level1/86_conv_depthwise_separable_2D.py",
    "level2/2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide.py",
    "level2/4_Conv2d_Mish_Mish.py",
    "level2/16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling.py",
    "level2/20_ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd.py",
    "level2/26_ConvTranspose3d_Add_HardSwish.py",
    "level2/48_Conv3d_Scaling_Tanh_Multiply_Sigmoid.py",
    "level2/54_Conv2d_Multiply_LeakyReLU_GELU.py",
    "level2/90_Conv3d_LeakyReLU_Sum_Clamp_GELU.py",
    "level2/100_ConvTranspose3d_Clamp_Min_Divide.py",
}


def task(source: str, key: str = "synthetic") -> Task:
    return Task(key=key, suite="x", level=None, name=key, source=source, source_sha256="0" * 64)


def kb_task(rel: str) -> Task:
    return task((KB / rel).read_text(encoding="utf-8"), rel)


def synthetic(init: str, forward: str, inputs: str = "torch.randn(2, 3, 8, 8)", args: str = "x") -> Task:
    return task(
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass Model(nn.Module):\n"
        f"    def __init__(self):\n        super().__init__()\n{init}\n"
        f"    def forward(self, {args}):\n{forward}\n\n\n"
        f"def get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return []\n"
    )


def emit(t: Task) -> str:
    recipe = base_recipes()[KEY]
    return recipe.emit(task_view(t), recipe.default_config)


def method(source: str, cls: str, name: str) -> str:
    tree = ast.parse(source)
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return ast.unparse(next(f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == name))


def test_the_recipe_is_registered_under_a_seed_local() -> None:
    assert KEY in base_recipes()
    assert KEY in {local.key for local in load_seed().locals}


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
        ("level1/2_Standard_matrix_multiplication_.py", "matmul has no channels-last cuDNN path"),
        ("level2/12_Gemm_Multiply_LeakyReLU.py", "linear has no channels-last cuDNN path"),
        ("level1/76_conv_standard_1D_dilated_strided__.py", "conv1d has no channels-last cuDNN path"),
        (
            "level2/42_ConvTranspose2d_GlobalAvgPool_BiasAdd_LogSumExp_Sum_Multiply.py",
            "mean (torch.mean) is not",
        ),
        ("level2/82_Conv2d_Tanh_Scaling_BiasAdd_Max.py", "max_pool2d"),
        ("level2/52_Conv2d_Activation_BatchNorm.py", "cannot be fused"),
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
            "        self.a = nn.Conv2d(3, 4, 3)\n        self.b = nn.Conv2d(4, 4, 1)",
            "        y = self.a(x)\n        return self.b(y) + y",
            "is used besides feeding conv2d",
        ),
        (
            "        self.seq = nn.Sequential(nn.Conv2d(3, 4, 3))",
            "        return self.seq(x)",
            "indexed container",
        ),
        (
            "        self.a = nn.Conv2d(3, 4, 3)",
            "        y = self.a(x)\n        return y.mean(dim=1)",
            "is not elementwise",
        ),
        (
            "        self.a = nn.Conv2d(3, 4, 3)",
            "        return torch.relu(x) + 1.0",
            "does not start with a convolution",
        ),
    ],
    ids=["intermediate_reused", "sequential", "reduction_epilogue", "no_conv"],
)
def test_synthetic_forwards_are_rejected(init: str, forward: str, reason: str) -> None:
    verdict = applies(KEY, synthetic(init, forward))
    assert not verdict and reason in verdict.reason, verdict.reason


def test_a_weight_passed_per_call_is_rejected() -> None:
    t = synthetic(
        "        pass",
        "        return F.conv2d(x, w)",
        inputs="torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)",
        args="x, w",
    )
    verdict = applies(KEY, t)
    assert not verdict and "weight is not a parameter" in verdict.reason, verdict.reason


def test_functional_conv_with_parameter_weights_is_written_with_the_parameters() -> None:
    t = synthetic(
        "        self.weight = nn.Parameter(torch.randn(4, 3, 3, 3))\n"
        "        self.bias = nn.Parameter(torch.randn(4))\n        self.scale = nn.Parameter(torch.randn(4, 1, 1))",
        "        return torch.sigmoid(F.conv2d(x, self.weight, self.bias, stride=2, padding=1)) * self.scale",
    )
    assert applies(KEY, t)
    source = emit(t)
    forward = method(source, "ModelNew", "forward")
    assert "torch.nn.functional.conv2d(x_cl, self.weight, self.bias, stride=2, padding=1" in forward
    assert "(self.weight,)" in method(source, "ModelNew", "__init__")


@pytest.mark.parametrize(
    "rel",
    [
        "level1/86_conv_depthwise_separable_2D.py",
        "level2/2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide.py",
        "level2/90_Conv3d_LeakyReLU_Sum_Clamp_GELU.py",
    ],
)
def test_weights_are_converted_once_in_init_and_the_input_once_per_call(rel: str) -> None:
    source = emit(kb_task(rel))
    report = static_analyse(source, PrecisionPolicy.FP32_STRICT, require_kernel=True)
    assert report.syntax_error is None and report.violations == []
    assert "allow_tf32" not in source  # precision is never touched
    init, forward = method(source, "ModelNew", "__init__"), method(source, "ModelNew", "forward")
    fmt = "torch.channels_last_3d" if "3d" in rel.lower() else "torch.channels_last"
    assert f"weight.data = weight.data.contiguous(memory_format={fmt})" in init
    assert forward.count("memory_format=") == 1  # the input copy; no weight conversion per call
    assert f"x.contiguous(memory_format={fmt})" in forward
    assert forward.rstrip().splitlines()[-1].strip().startswith("return conv")  # one Triton launcher last


def test_depthwise_separable_keeps_the_intermediate_channels_last() -> None:
    forward = method(emit(kb_task("level1/86_conv_depthwise_separable_2D.py")), "ModelNew", "forward")
    lines = [line.strip() for line in forward.splitlines()[1:]]
    assert lines == [
        "x_cl = x.contiguous(memory_format=torch.channels_last)",
        "y1 = self.depthwise(x_cl)",
        "y = self.pointwise(y1)",
        "return conv2d_to_nchw(y)",
    ]
    init = method(emit(kb_task("level1/86_conv_depthwise_separable_2D.py")), "ModelNew", "__init__")
    assert "(self.depthwise.weight, self.pointwise.weight)" in init


def test_per_channel_operands_are_read_at_the_channel_index() -> None:
    source = emit(kb_task("level2/2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide.py"))
    assert "tl.load(bias_ptr + c, mask=c < C" in source
    assert "def broadcast_layout" not in source  # no flat-index broadcast left
