"""Channels-last conv rule kernels on CUDA at the tasks' DEFAULT sizes (marker gpu).

    pytest -m gpu tests/gpu/test_rules_library_channels_last_gpu.py -s     # -s prints the RULES_GPU lines

Every level1/level2 dev task `library_offload.channels_last_conv` applies to: generate with the default config,
build Model and ModelNew with the same seed on the GPU (identical weights), TF32 off (fp32-strict), run both on
the task's own inputs and on a signed copy with a mean offset (x * 6 - 3 + 10): allclose(1e-4, 1e-4), output
contiguous like the reference's. cuDNN's channels-last algorithms round differently from the NCHW ones; a task
where that exceeds 1e-4 FAILS here (the check is never loosened). Then
`RULES_GPU task eager_ms kernel_ms speedup max_abs_err conv_out_channels_last` (triton.testing.do_bench medians,
the per-call input copy included; information, not assertions).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.gpu.rules_gpu_support import (
    FP32_STRICT,
    GPU_MARKS,
    CheckOptions,
    check_case,
    generate,
    make_task,
    report,
    signed_offset,
    time_checked,
)

KEY = "library_offload.channels_last_conv"
CONVS = (torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)
CASES = [
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
]

# a signed copy with a mean offset; the output must also be laid out like the reference's (same strides)
CHECKS = CheckOptions(transform=signed_offset, check_strides=True)

pytestmark = [*GPU_MARKS, FP32_STRICT]


def conv_output_is_channels_last(model_new: torch.nn.Module, inputs: list[torch.Tensor]) -> bool:
    """Whether the last conv of ModelNew really produced a channels-last tensor on CUDA (the fast path)."""
    seen: list[bool] = []
    last = [m for m in model_new.modules() if isinstance(m, CONVS)][-1]

    def hook(_module: Any, _args: Any, out: torch.Tensor) -> None:
        fmt = torch.channels_last if out.dim() == 4 else torch.channels_last_3d
        seen.append(out.is_contiguous(memory_format=fmt))

    handle = last.register_forward_hook(hook)
    try:
        with torch.no_grad():
            model_new(*inputs)
    finally:
        handle.remove()
    return seen == [True]


@pytest.mark.parametrize("rel", CASES, ids=[c.split("/")[1][:-3] for c in CASES])
def test_channels_last_kernel_matches_reference_on_cuda_at_default_sizes(rel: str, tmp_path: Path) -> None:
    task = make_task(rel)
    source = generate(task, KEY)
    checked = check_case(task, source, tmp_path, CHECKS)
    channels_last = conv_output_is_channels_last(checked.models.model_new, checked.inputs)
    result = time_checked(checked)
    report("RULES_GPU", rel, KEY, result=result, extra=f" conv_out_channels_last={channels_last}")
