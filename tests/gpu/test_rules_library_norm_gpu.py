"""Norm / reduction / softmax-over-dim rule kernels on CUDA at the tasks' DEFAULT sizes (marker gpu).

    pytest -m gpu tests/gpu/test_rules_library_norm_gpu.py -s     # -s prints the RULES_GPU lines

Each case: generate with the default config, build Model and ModelNew with the same seed on the GPU (identical
weights), TF32 off, run both on the task's own inputs and on a signed copy with a mean offset (x * 6 - 3 + 10):
allclose(1e-4, 1e-4), exact for argmin indices. Then `RULES_GPU task recipe eager_ms kernel_ms speedup`
(triton.testing.do_bench medians; information, not assertions). The ladder test checks every tuning config.

    pytest -m gpu tests/gpu/test_rules_library_norm_gpu.py -s -k "short_row or 34_ or 62_ or 88_ or 94_"

times the short-row norm kernel (recipes/reduce/rows.py) on its own: `RULES_GPU_TAIL` lines give the fused
kernel's milliseconds on the library op's output against the eager ops after the library op.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from htam_graph.rules.recipes.tuning import REDUCE_LADDER
from tests.gpu.rules_gpu_support import (
    FP32_STRICT,
    GPU_MARKS,
    CheckOptions,
    build_models,
    check_case,
    draw_inputs,
    generate,
    make_task,
    report,
    run_both,
    run_case,
    signed,
    signed_offset,
    time_call,
    transformed,
)

NORM = "reduction_structure.single_pass_norm"
DIM = "reduction_structure.dim_reduction"
LSE = "reduction_structure.online_logsumexp"
CASES = [
    ("level1/34_InstanceNorm.py", NORM),
    ("level1/36_RMSNorm_.py", NORM),
    ("level1/38_L1Norm_.py", NORM),
    ("level1/40_LayerNorm.py", NORM),
    ("level2/30_Gemm_GroupNorm_Hardtanh.py", NORM),
    ("level2/34_ConvTranspose3d_LayerNorm_GELU_Scaling.py", NORM),
    ("level2/60_ConvTranspose3d_Swish_GroupNorm_HardSwish.py", NORM),
    ("level2/62_Matmul_GroupNorm_LeakyReLU_Sum.py", NORM),
    ("level2/88_Gemm_GroupNorm_Swish_Multiply_Swish.py", NORM),
    ("level2/94_Gemm_BiasAdd_Hardtanh_Mish_GroupNorm.py", NORM),
    ("level1/48_Mean_reduction_over_a_dimension.py", DIM),
    ("level1/52_Argmin_over_a_dimension.py", DIM),
    ("level2/56_Matmul_Sigmoid_Sum.py", DIM),
    ("level1/24_LogSoftmax.py", LSE),
    ("level2/22_Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish.py", LSE),
    ("level2/58_ConvTranspose3d_LogSumExp_HardSwish_Subtract_Clamp.py", LSE),
    ("level2/64_Gemm_LogSumExp_LeakyReLU_LeakyReLU_GELU_GELU.py", LSE),
    ("level2/38_ConvTranspose3d_AvgPool_Clamp_Softmax_Multiply.py", LSE),
]
SPATIAL_SOFTMAX = "level2/38_ConvTranspose3d_AvgPool_Clamp_Softmax_Multiply.py"

# a signed copy with a mean offset; argmin indices must be equal, not merely close
CHECKS = CheckOptions(transform=signed_offset, exact_integers=True)

pytestmark = [*GPU_MARKS, FP32_STRICT]


@pytest.mark.parametrize(("rel", "key"), CASES, ids=[c[0].split("/")[1][:-3] for c in CASES])
def test_rule_kernel_matches_reference_on_cuda_at_default_sizes(rel: str, key: str, tmp_path: Path) -> None:
    task = make_task(rel)
    source = generate(task, key)
    result = run_case(task, source, tmp_path, CHECKS)
    report("RULES_GPU", rel, key, result=result)


@pytest.mark.parametrize(
    ("rel", "key"),
    [
        ("level1/40_LayerNorm.py", NORM),
        ("level1/36_RMSNorm_.py", NORM),
        ("level1/52_Argmin_over_a_dimension.py", DIM),
        ("level2/58_ConvTranspose3d_LogSumExp_HardSwish_Subtract_Clamp.py", LSE),
    ],
)
def test_every_tuning_config_is_correct_on_cuda(rel: str, key: str, tmp_path: Path) -> None:
    task = make_task(rel)
    for config in REDUCE_LADDER:
        source = generate(task, key, config)
        r = run_case(task, source, tmp_path, CHECKS)
        print(
            f"\nRULES_GPU_TUNE {rel} {config} max_abs_err={r.max_abs_err:.2e} kernel_ms={r.kernel_ms:.4f}"
            f" eager_ms={r.eager_ms:.4f}"
        )


def test_spatial_softmax_with_a_random_scale_is_close_relative_to_its_values(tmp_path: Path) -> None:
    """level2/38's outputs are ~1/(d*h*w) ~ 8e-6 at default sizes, so allclose(1e-4, 1e-4) above cannot tell
    them from zeros: here a relative tolerance, and a random per-channel scale (the task's is all ones)."""
    task = make_task(SPATIAL_SOFTMAX)
    models = build_models(task, generate(task, LSE), tmp_path)
    with torch.no_grad():
        torch.manual_seed(2)
        scale = torch.randn_like(models.model.scale)
        models.model.scale.copy_(scale)
        models.model_new.scale.copy_(scale)
    inputs = draw_inputs(models.ref_mod)
    for trial in range(2):
        if trial == 1:
            inputs = transformed(inputs, signed)
        expected, got = run_both(models.model, models.model_new, inputs)
        rel = ((got - expected).abs() / expected.abs()).max().item()
        print(f"\nRULES_GPU_REL {SPATIAL_SOFTMAX} trial={trial} max_rel_err={rel:.2e}")
        assert got.shape == expected.shape
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-12), f"max relative error {rel}"
        del expected, got


# The eager ops after the library op of each short-row task (what the fused kernel replaces), and the library
# module's name. Written out per task: the reference forward minus its first call.
_TAILS: dict[str, tuple[str, Callable[[Any, torch.Tensor], torch.Tensor]]] = {
    "level2/34_ConvTranspose3d_LayerNorm_GELU_Scaling.py": (
        "conv_transpose",
        lambda m, y: F.gelu(m.layer_norm(y)) * m.scaling_factor,
    ),
    "level2/62_Matmul_GroupNorm_LeakyReLU_Sum.py": (
        "fc",
        lambda m, y: (lambda t: t + t)(m.leaky_relu(m.gn(y))),
    ),
    "level2/88_Gemm_GroupNorm_Swish_Multiply_Swish.py": (
        "gemm",
        lambda m, y: (lambda t: t * torch.sigmoid(t))(
            (lambda u: u * torch.sigmoid(u))(m.group_norm(y)) * m.multiply_weight
        ),
    ),
    "level2/94_Gemm_BiasAdd_Hardtanh_Mish_GroupNorm.py": (
        "gemm",
        lambda m, y: m.groupnorm(m.mish(m.hardtanh(y + m.bias))),
    ),
}


@pytest.mark.parametrize("rel", list(_TAILS), ids=[r.split("/")[1][:-3] for r in _TAILS])
def test_short_row_norm_kernel_alone_on_cuda(rel: str, tmp_path: Path) -> None:
    """Correctness as above, then the fused launcher timed alone on the arguments ModelNew passed it (the library
    op's output, without the Linear bias for GEMM tasks), against the eager tail on the library op's output."""
    task = make_task(rel)
    source = generate(task, NORM)
    assert "_rows_kernel[" in source, "the short-row kernel is not generated"
    launcher_name = re.search(r"return (fused_\w+)\(", source)
    assert launcher_name is not None
    checked = check_case(task, source, tmp_path, CHECKS)
    model, model_new, inputs = checked.models.model, checked.models.model_new, checked.inputs
    namespace = type(model_new).forward.__globals__  # the candidate module's globals (it left sys.modules)
    launcher = namespace[launcher_name.group(1)]
    captured: list[tuple[Any, ...]] = []

    def recording(*args: Any) -> torch.Tensor:
        captured.append(args)
        return launcher(*args)

    namespace[launcher_name.group(1)] = recording
    try:
        with torch.no_grad():
            model_new(*inputs)
    finally:
        namespace[launcher_name.group(1)] = launcher
    assert len(captured) == 1, f"ModelNew called {launcher_name.group(1)} {len(captured)} times"
    library, tail = _TAILS[rel]
    with torch.no_grad():
        y = getattr(model, library)(*inputs)
        assert torch.allclose(launcher(*captured[0]), tail(model, y), rtol=1e-4, atol=1e-4)
    kernel_ms = time_call(lambda: launcher(*captured[0]))
    eager_ms = time_call(lambda: tail(model, y))
    print(
        f"\nRULES_GPU_TAIL {rel} elements={y.numel()} fused_kernel_ms={kernel_ms:.4f} eager_tail_ms={eager_ms:.4f}"
        f" speedup={eager_ms / kernel_ms:.2f}x read_write_GBps={2 * y.numel() * 4 / kernel_ms / 1e6:.0f}"
    )
