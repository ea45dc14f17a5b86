"""Rule-generated Triton kernels on CUDA at the tasks' DEFAULT sizes (marker gpu: run on the GPU machine).

    pytest -m gpu tests/gpu/test_rules_gpu.py -s     # -s prints the timing table

Each case: generate with the default config, build Model and ModelNew with the same seed on the GPU (weights
must be identical), run both on the task's own inputs and on a signed copy (x * 6 - 3), allclose(1e-4, 1e-4),
TF32 off. The printed timings (triton.testing.do_bench median, ms) are information, not assertions.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from htam_graph.kernels_runtime.worker.taskmod import load_task_module
from htam_graph.rules import KernelConfig
from htam_graph.rules.recipes.tuning import ELEMENTWISE_LADDER, ROW_LADDER, VECTOR_LADDER
from tests.gpu.rules_gpu_support import (
    FP32_STRICT,
    GPU_MARKS,
    generate,
    import_candidate,
    make_task,
    run_case,
)

ELEMENTWISE = [
    "20_LeakyReLU",
    "22_Tanh",
    "26_GELU_",
    "28_HardSigmoid",
    "30_Softsign",
    "32_HardTanh",
    "88_MinGPTNewGelu",
]
EPILOGUE = [
    "100_ConvTranspose3d_Clamp_Min_Divide",
    "12_Gemm_Multiply_LeakyReLU",
    "16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling",
    "26_ConvTranspose3d_Add_HardSwish",
    "2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide",
    "48_Conv3d_Scaling_Tanh_Multiply_Sigmoid",
    "4_Conv2d_Mish_Mish",
    "54_Conv2d_Multiply_LeakyReLU_GELU",
    "68_Matmul_Min_Subtract",
    "70_Gemm_Sigmoid_Scaling_ResidualAdd",
    "76_Gemm_Add_ReLU",
    "86_Matmul_Divide_GELU",
    "90_Conv3d_LeakyReLU_Sum_Clamp_GELU",
]
CASES = (
    [(f"level1/{t}.py", "fusion.elementwise_chain") for t in ELEMENTWISE]
    + [(f"level2/{t}.py", "fusion.library_epilogue") for t in EPILOGUE]
    + [("level1/24_LogSoftmax.py", "reduction_structure.row_softmax")]
)

pytestmark = [*GPU_MARKS, FP32_STRICT]


@pytest.mark.parametrize(("rel", "key"), CASES, ids=[c[0].split("/")[1][:-3] for c in CASES])
def test_rule_kernel_matches_reference_on_cuda_at_default_sizes(rel: str, key: str, tmp_path: Path) -> None:
    task = make_task(rel)
    source = generate(task, key)
    r = run_case(task, source, tmp_path)
    print(
        f"\nRULES_GPU {rel} {key} max_abs_err={r.max_abs_err:.2e} rules_ms={r.kernel_ms:.4f}"
        f" eager_ms={r.eager_ms:.4f} speedup={r.speedup:.3f}x"
    )


@pytest.mark.parametrize(
    ("rel", "key", "ladder"),
    [
        ("level1/88_MinGPTNewGelu.py", "fusion.elementwise_chain", ELEMENTWISE_LADDER),
        ("level2/76_Gemm_Add_ReLU.py", "fusion.library_epilogue", VECTOR_LADDER),
        ("level1/24_LogSoftmax.py", "reduction_structure.row_softmax", ROW_LADDER),
    ],
)
def test_every_tuning_config_is_correct_on_cuda(
    rel: str, key: str, ladder: tuple[KernelConfig, ...], tmp_path: Path
) -> None:
    task = make_task(rel)
    for config in ladder:
        source = generate(task, key, config)
        r = run_case(task, source, tmp_path)
        print(
            f"\nRULES_GPU_TUNE {rel} {config} max_abs_err={r.max_abs_err:.2e} rules_ms={r.kernel_ms:.4f}"
            f" eager_ms={r.eager_ms:.4f}"
        )


def test_more_than_2_pow_31_elements_uses_64_bit_offsets(tmp_path: Path) -> None:
    # 5462 x 393216 = 2_147_745_792 elements > 2**31 - 1: int32 offsets would wrap and corrupt the tail.
    task = make_task("level1/22_Tanh.py")
    source = generate(task, "fusion.elementwise_chain", KernelConfig())
    ref_mod = load_task_module(task.source, "reference", {"batch_size": 5462})
    cand = import_candidate(source, tmp_path)
    x = torch.empty(5462, 393216, device="cuda").uniform_(-3, 3)
    got = cand.ModelNew()(x)
    expected = ref_mod.Model()(x)
    assert got.numel() > 2**31 - 1
    assert torch.allclose(got[-2:], expected[-2:], rtol=1e-4, atol=1e-4)  # the tail is where int32 would wrap
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4)
