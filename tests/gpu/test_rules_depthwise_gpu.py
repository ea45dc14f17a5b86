"""Direct depthwise conv rule kernels on CUDA at the tasks' DEFAULT sizes (marker gpu).

    pytest -m gpu tests/gpu/test_rules_depthwise_gpu.py -s     # -s prints the RULES_GPU lines

Every level1/level2 dev task `data_reuse.depthwise_conv_direct` applies to (82, 84, 86), plus synthetic forwards
at moderate sizes (stride 2 + padding + dilation + bias + fused epilogue, channel multiplier with an asymmetric
kernel, padding='same', Conv1d): generate with the default config, build Model and ModelNew with the same seed
on the GPU (identical weights), TF32 off (fp32-strict), run both on the task's own inputs and on a signed copy
with a mean offset (x * 6 - 3 + 10): allclose(1e-4, 1e-4), contiguous output. Then changed weights (in place,
both models): the kernel must follow. Then `RULES_GPU task eager_ms kernel_ms speedup max_abs_err GB/s`
(triton.testing.do_bench medians; GB/s counts one read of x and one write of the depthwise output, the floor;
information, not assertions). The ladder test checks every tuning config on 82 and prints its time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from htam_graph.model import Task
from htam_graph.rules.recipes.tuning import DEPTHWISE_LADDER
from tests.gpu.rules_gpu_support import (
    FP32_STRICT,
    GPU_MARKS,
    Checked,
    CheckOptions,
    check_case,
    compare_outputs,
    generate,
    make_task,
    report,
    run_both,
    signed_offset,
    time_checked,
)

KEY = "data_reuse.depthwise_conv_direct"
CASES = [
    "level1/82_conv_depthwise_2D_square_input_square_kernel.py",
    "level1/84_conv_depthwise_2D_asymmetric_input_square_kernel.py",
    "level1/86_conv_depthwise_separable_2D.py",
]
CHECKS = CheckOptions(transform=signed_offset, check_strides=True)

_HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass Model(nn.Module):\n"


def _synthetic(init: str, forward: str, inputs: str) -> str:
    return (
        f"{_HEAD}    def __init__(self):\n        super().__init__()\n{init}\n\n"
        f"    def forward(self, x):\n{forward}\n\n\n"
        f"def get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return []\n"
    )


SYNTHETIC = {
    "stride2_pad_dilation_bias_epilogue": _synthetic(
        "        self.conv = nn.Conv2d(32, 32, 3, stride=2, padding=2, dilation=2, groups=32, bias=True)\n"
        "        self.scale = nn.Parameter(torch.randn(32, 1, 1))",
        "        return F.gelu(self.conv(x) * self.scale)",
        "torch.randn(8, 32, 257, 263)",
    ),
    "multiplier2_kernel5x3": _synthetic(
        "        self.conv = nn.Conv2d(48, 96, (5, 3), padding=(2, 1), groups=48, bias=True)",
        "        return self.conv(x)",
        "torch.randn(4, 48, 199, 301)",
    ),
    "padding_same_kernel4": _synthetic(
        "        self.conv = nn.Conv2d(16, 16, 4, padding='same', groups=16, bias=False)",
        "        return self.conv(x)",
        "torch.randn(4, 16, 128, 130)",
    ),
    "conv1d_k7_stride2": _synthetic(
        "        self.conv = nn.Conv1d(64, 64, 7, stride=2, padding=3, groups=64, bias=True)",
        "        return self.conv(x)",
        "torch.randn(16, 64, 10001)",
    ),
}

pytestmark = [*GPU_MARKS, FP32_STRICT]


def _floor_gbps(checked: Checked, kernel_ms: float) -> float:
    """GB/s of reading the input once and writing the depthwise conv output once, at `kernel_ms`."""
    (x,) = checked.inputs
    convs = (torch.nn.Conv1d, torch.nn.Conv2d)
    conv = next(m for m in checked.models.model.modules() if isinstance(m, convs))
    with torch.no_grad():
        y = conv(x)
    return (x.numel() + y.numel()) * x.element_size() / (kernel_ms * 1e-3) / 1e9


def _weights_changed_are_followed(checked: Checked, device: str) -> None:
    """Both models' parameters changed in place: ModelNew must read them at the call, not a cached copy."""
    models = checked.models
    with torch.no_grad():
        for p, q in zip(models.model.parameters(), models.model_new.parameters(), strict=True):
            p.mul_(-1.5).add_(0.25)
            q.mul_(-1.5).add_(0.25)
    expected, got = run_both(models.model, models.model_new, checked.inputs, device=device)
    compare_outputs(got, expected, device=device, check_strides=True)


def _run(task: Task, tmp_path: Path, label: str, device: str = "cuda") -> None:
    checked = check_case(task, generate(task, KEY), tmp_path, CHECKS, device=device)
    result = time_checked(checked, device=device)
    gbps = _floor_gbps(checked, result.kernel_ms)
    report("RULES_GPU", label, KEY, result=result, extra=f" GB/s={gbps:.0f}")
    _weights_changed_are_followed(checked, device)


@pytest.mark.parametrize("rel", CASES, ids=[c.split("/")[1][:2] for c in CASES])
def test_depthwise_kernel_matches_reference_on_cuda_at_default_sizes(rel: str, tmp_path: Path) -> None:
    _run(make_task(rel), tmp_path, rel)


@pytest.mark.parametrize("name", list(SYNTHETIC))
def test_synthetic_depthwise_kernel_matches_reference_on_cuda(name: str, tmp_path: Path) -> None:
    source = SYNTHETIC[name]
    task = Task(
        key=f"synthetic/{name}", suite="x", level=None, name=name, source=source, source_sha256="0" * 64
    )
    _run(task, tmp_path, f"synthetic/{name}")


def test_every_tuning_config_is_correct_on_cuda(tmp_path: Path) -> None:
    task = make_task(CASES[0])
    for config in DEPTHWISE_LADDER:
        checked = check_case(task, generate(task, KEY, config), tmp_path, CHECKS)
        r = time_checked(checked)
        print(
            f"\nRULES_GPU_TUNE {CASES[0]} {config} max_abs_err={r.max_abs_err:.2e} kernel_ms={r.kernel_ms:.4f}"
            f" eager_ms={r.eager_ms:.4f} GB/s={_floor_gbps(checked, r.kernel_ms):.0f}"
        )
        del checked
