"""conv_transpose_as_conv: what it accepts, what it rejects and why, and the shape of what it writes (no kernels run)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from htam_graph.kernels_runtime.static_checks import analyse as static_analyse
from htam_graph.model import PrecisionPolicy, Task
from htam_graph.rules import applies
from htam_graph.rules.base import NotApplicable
from htam_graph.rules.codegen.fused_elementwise import Leaf, Region
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import base_recipes, default_recipes
from htam_graph.rules.recipes.conv_transpose.codegen import phase_kernel_source

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
KEY = "algebraic_rewrite.conv_transpose_as_conv"


FUSED = [
    "level1/58_conv_transposed_3D__asymmetric_input__asymmetric_kernel.py",
    "level1/64_conv_transposed_1D.py",
    "level1/68_conv_transposed_3D__square_input__asymmetric_kernel.py",
    "level1/70_conv_transposed_3D__asymmetric_input__square_kernel.py",
    "level1/72_conv_transposed_3D_asymmetric_input_asymmetric_kernel___strided_padded_grouped_.py",
    "level2/100_ConvTranspose3d_Clamp_Min_Divide.py",
    "level2/20_ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd.py",
]
KEPT = [
    "level2/10_ConvTranspose2d_MaxPool_Hardtanh_Mean_Tanh.py",
    "level2/34_ConvTranspose3d_LayerNorm_GELU_Scaling.py",
    "level2/38_ConvTranspose3d_AvgPool_Clamp_Softmax_Multiply.py",
    "level2/78_ConvTranspose3d_Max_Max_Sum.py",
]


def task(source: str, key: str = "synthetic") -> Task:
    return Task(key=key, suite="x", level=None, name=key, source=source, source_sha256="0" * 64)


def kb_task(rel: str) -> Task:
    return task((KB / rel).read_text(encoding="utf-8"), rel)


def synthetic(init: str, forward: str, inputs: str = "torch.randn(2, 4, 5, 6)", prelude: str = "") -> Task:
    return task(
        f"import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n{prelude}\n\nclass Model(nn.Module):\n"
        f"    def __init__(self):\n        super().__init__()\n{init}\n"
        f"    def forward(self, x):\n{forward}\n\n\n"
        f"def get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return []\n"
    )


def emit(t: Task) -> str:
    recipe = default_recipes()[KEY]
    return recipe.emit(task_view(t), recipe.default_config)


def test_registered_in_the_base_recipes() -> None:
    assert KEY in base_recipes()


@pytest.mark.parametrize("rel", FUSED + KEPT)
def test_dev_tasks_are_accepted_and_pass_the_static_checks(rel: str) -> None:
    verdict = applies(KEY, kb_task(rel))
    assert verdict, verdict.reason
    source = emit(kb_task(rel))
    report = static_analyse(source, PrecisionPolicy.FP32_STRICT, require_kernel=True)
    assert report.syntax_error is None and report.has_triton_kernel and report.violations == []
    tree = ast.parse(source)
    model_new = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    init = next(n for n in model_new.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    # the weight transform is per call: nothing in __init__ touches the weights
    assert "flip" not in ast.unparse(init) and "weight" not in ast.unparse(init)
    forward = ast.unparse(
        next(n for n in model_new.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    )
    called = {
        n.func.id
        for n in ast.walk(ast.parse(forward))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    if rel in KEPT:  # the reference's other ops stay; only the conv call is replaced
        assert "conv_transpose_as_conv" in called
    else:
        assert "conv_transpose_phases" in called
    assert "conv_transpose1d(" not in source and "conv_transpose2d(" not in source
    assert "conv_transpose3d(" not in source


@pytest.mark.parametrize(
    ("rel", "reason"),
    [
        ("level1/54_conv_standard_3D__square_input__square_kernel.py", "0 transposed convolutions"),
        ("level1/20_LeakyReLU.py", "0 transposed convolutions"),
    ],
)
def test_dev_tasks_without_a_transposed_conv_are_rejected(rel: str, reason: str) -> None:
    verdict = applies(KEY, kb_task(rel))
    assert not verdict and reason in verdict.reason


@pytest.mark.parametrize(
    ("init", "forward", "reason", "prelude"),
    [
        (
            "        self.a = nn.ConvTranspose2d(4, 4, 3)\n        self.b = nn.ConvTranspose2d(4, 4, 3)",
            "        return self.b(self.a(x))",
            "2 transposed convolutions",
            "",
        ),
        (
            "        self.w = nn.Parameter(torch.randn(4, 3, 3, 3))",
            "        return F.conv_transpose2d(x, self.w)",
            "functional call",
            "",
        ),
        (
            "        self.up = nn.ConvTranspose2d(4, 4, 3)",
            "        return helper(self.up(x))",
            "task-level name 'helper'",
            "def helper(t):\n    return F.max_pool2d(t, 2)\n",  # not elementwise: the forward would be kept
        ),
        (
            "        self.up = nn.ModuleList([nn.ConvTranspose2d(4, 4, 3)])",
            "        return self.up[0](x)",
            "indexed container",
            "",
        ),
    ],
)
def test_synthetic_forwards_are_rejected_with_a_reason(
    init: str, forward: str, reason: str, prelude: str
) -> None:
    verdict = applies(KEY, synthetic(init, forward, prelude=prelude))
    assert not verdict and reason in verdict.reason, verdict.reason


def test_a_forward_that_calls_the_conv_twice_in_its_text_is_not_kept() -> None:
    t = synthetic(
        "        self.up = nn.ConvTranspose2d(4, 4, 3, padding=1)\n        self.pool = nn.MaxPool2d(2)\n"
        "        self.small = True",
        "        if self.small:\n            return self.pool(self.up(x))\n        return self.pool(self.up(x * 2))",
    )
    verdict = applies(KEY, t)
    assert not verdict and "2 times" in verdict.reason, verdict.reason


def test_an_elementwise_epilogue_is_fused_into_the_phase_kernel() -> None:
    t = synthetic(
        "        self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, output_padding=1)\n"
        "        self.bias = nn.Parameter(torch.randn(6, 1, 1))",
        "        return torch.relu(self.up(x) + self.bias) * 0.5",
    )
    source = emit(t)
    kernel = source[source.index("@triton.jit\ndef conv_transpose2d_phase_kernel") :]
    kernel = kernel[: kernel.index("\n\n\n")]
    assert "tl.maximum" in kernel and "bias_ptr + c" in kernel  # relu, per-channel bias at the row's channel
    assert (
        "return conv_transpose2d_write_phases(phases, out_sizes, module.stride, module.bias, self.bias)"
        in source
    )


@pytest.mark.parametrize("name", ["phase0", "phase3_s3", "o3", "y_phase", "row_phase_tensors"])
def test_operand_names_that_clash_with_the_phase_writer_are_refused(name: str) -> None:
    region = Region((Leaf("conv", "conv_out", "y", False), Leaf("b", name, name, True)), (), (), "conv")
    with pytest.raises(NotApplicable, match=name):
        phase_kernel_source(region, "conv", "probe_kernel", frozenset())
    # a name of its own passes
    phase_kernel_source(
        Region((Leaf("conv", "conv_out", "y", False), Leaf("b", "skip", "skip", True)), (), (), "conv"),
        "conv",
        "probe_kernel",
        frozenset(),
    )
