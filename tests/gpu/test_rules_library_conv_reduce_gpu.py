"""fusion.conv_reduction_epilogue kernels on CUDA at the tasks' DEFAULT sizes (marker gpu).

    pytest -m gpu tests/gpu/test_rules_library_conv_reduce_gpu.py -s     # -s prints the RULES_GPU lines

Each case: generate with the default config, build Model and ModelNew with the same seed on the GPU (identical
weights), TF32 off (cuDNN runs the same fp32 conv in both), run both on the task's own inputs and on a signed
copy with a mean offset (x * 6 - 3 + 10): allclose(1e-4, 1e-4); the state dicts (batch norm running statistics)
must agree after each forward. Batch norm tasks are also checked in eval mode. Then
`RULES_GPU task eager_ms kernel_ms speedup` (triton.testing.do_bench medians; information, not assertions).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from htam_graph.model import Task
from tests.gpu.rules_gpu_support import (
    FP32_STRICT,
    GPU_MARKS,
    CaseResult,
    Checked,
    Comparison,
    Models,
    build_models,
    compare_outputs,
    draw_inputs,
    generate,
    make_task,
    report,
    run_both,
    signed_offset,
    time_checked,
    transformed,
)

KEY = "fusion.conv_reduction_epilogue"
CASES = [
    "level2/6_Conv3d_Softmax_MaxPool_MaxPool.py",
    "level2/8_Conv3d_Divide_Max_GlobalAvgPool_BiasAdd_Sum.py",
    "level2/10_ConvTranspose2d_MaxPool_Hardtanh_Mean_Tanh.py",
    "level2/24_Conv3d_Min_Softmax.py",
    "level2/32_Conv2d_Scaling_Min.py",
    "level2/36_ConvTranspose2d_Min_Sum_GELU_Add.py",
    "level2/42_ConvTranspose2d_GlobalAvgPool_BiasAdd_LogSumExp_Sum_Multiply.py",
    "level2/44_ConvTranspose2d_Multiply_GlobalAvgPool_GlobalAvgPool_Mean.py",
    "level2/52_Conv2d_Activation_BatchNorm.py",
    "level2/72_ConvTranspose3d_BatchNorm_AvgPool_AvgPool.py",
    "level2/78_ConvTranspose3d_Max_Max_Sum.py",
    "level2/92_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp.py",
    "level2/96_ConvTranspose3d_Multiply_Max_GlobalAvgPool_Clamp.py",
    "level2/46_Conv2d_Subtract_Tanh_Subtract_AvgPool.py",
    "level2/50_ConvTranspose3d_Scaling_AvgPool_BiasAdd_Scaling.py",
    "level2/58_ConvTranspose3d_LogSumExp_HardSwish_Subtract_Clamp.py",
    "level2/60_ConvTranspose3d_Swish_GroupNorm_HardSwish.py",
    "level2/74_ConvTranspose3d_LeakyReLU_Multiply_LeakyReLU_Max.py",
    "level2/82_Conv2d_Tanh_Scaling_BiasAdd_Max.py",
]

pytestmark = [*GPU_MARKS, FP32_STRICT]


def _compare(models: Models, inputs: list[torch.Tensor]) -> Comparison:
    expected, got = run_both(models.model, models.model_new, inputs)
    comparison = compare_outputs(got, expected)
    ref_state, new_state = models.model.state_dict(), models.model_new.state_dict()
    for k in ref_state:  # batch norm running statistics are updated the same way
        assert torch.allclose(ref_state[k].float(), new_state[k].float(), rtol=1e-4, atol=1e-5), k
    return comparison


def run_case(task: Task, candidate_source: str, directory: Path) -> CaseResult:
    """Check ModelNew against Model on CUDA (own inputs, a shifted copy, eval mode for batch norm); time both."""
    models = build_models(task, candidate_source, directory)
    inputs = draw_inputs(models.ref_mod)
    has_batch_norm = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in models.model.modules())
    worst = _compare(models, inputs)
    # a copy: the timing below runs on the task's own inputs
    shifted = transformed([x.clone() for x in inputs], signed_offset)
    worst = worst.worst(_compare(models, shifted))
    if has_batch_norm:
        models.model.eval()
        models.model_new.eval()
        worst = worst.worst(_compare(models, inputs))
        models.model.train()
        models.model_new.train()
    del shifted
    return time_checked(Checked(models, inputs, worst))


@pytest.mark.parametrize("rel", CASES, ids=[c.split("/")[1].split("_")[0] for c in CASES])
def test_rule_kernel_matches_reference_on_cuda_at_default_sizes(rel: str, tmp_path: Path) -> None:
    task = make_task(rel)
    source = generate(task, KEY)
    report("RULES_GPU", rel, KEY, result=run_case(task, source, tmp_path))
