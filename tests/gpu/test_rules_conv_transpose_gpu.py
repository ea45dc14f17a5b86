"""conv_transpose_as_conv on CUDA at the tasks' DEFAULT sizes (marker gpu).

    pytest -m gpu tests/gpu/test_rules_conv_transpose_gpu.py -s     # -s prints the RULES_GPU lines

Each case: generate with the default config, build Model and ModelNew with the same seed on the GPU (identical
weights), TF32 off, run both on the task's own inputs and on a signed copy: allclose(1e-4, 1e-4). Then
`RULES_GPU task recipe eager_ms kernel_ms speedup ... phases_ms= conv_transpose_ms=`: whole-forward medians
(triton.testing.do_bench), plus the per-phase forward convolutions alone against the module's own eager
conv_transpose alone (where the time goes). Timings are information, not assertions.
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
    time_call,
    time_checked,
)

KEY = "algebraic_rewrite.conv_transpose_as_conv"
CASES = [
    "level1/58_conv_transposed_3D__asymmetric_input__asymmetric_kernel.py",
    "level1/64_conv_transposed_1D.py",
    "level1/68_conv_transposed_3D__square_input__asymmetric_kernel.py",
    "level1/70_conv_transposed_3D__asymmetric_input__square_kernel.py",
    "level1/72_conv_transposed_3D_asymmetric_input_asymmetric_kernel___strided_padded_grouped_.py",
    "level1/74_conv_transposed_1D_dilated.py",
    "level1/78_conv_transposed_2D_asymmetric_input_asymmetric_kernel___padded__.py",
    "level2/100_ConvTranspose3d_Clamp_Min_Divide.py",
    "level2/16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling.py",
    "level2/20_ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd.py",
    "level2/26_ConvTranspose3d_Add_HardSwish.py",
    "level2/2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide.py",
    # the ops around the conv are kept as they are (torch), only the conv is rewritten
    "level2/10_ConvTranspose2d_MaxPool_Hardtanh_Mean_Tanh.py",
    "level2/34_ConvTranspose3d_LayerNorm_GELU_Scaling.py",
    "level2/38_ConvTranspose3d_AvgPool_Clamp_Softmax_Multiply.py",
    "level2/78_ConvTranspose3d_Max_Max_Sum.py",
]

pytestmark = [*GPU_MARKS, FP32_STRICT]


def _conv_module(model: torch.nn.Module) -> torch.nn.Module:
    kinds = (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)
    return next(m for m in model.modules() if isinstance(m, kinds))


@pytest.mark.parametrize("rel", CASES, ids=[c.split("/")[1][:-3] for c in CASES])
def test_rewrite_matches_reference_on_cuda_at_default_sizes(rel: str, tmp_path: Path) -> None:
    task = make_task(rel)
    source = generate(task, KEY)
    checked = check_case(task, source, tmp_path, CheckOptions())
    result = time_checked(checked)
    # where the time goes: the per-phase forward convs alone vs the eager transposed conv alone
    module = _conv_module(checked.models.model)
    phases = type(checked.models.model_new).forward.__globals__["conv_transpose_phases"]
    x = checked.inputs[0]
    if rel.startswith("level2/38"):  # its avg-pool runs before the conv
        reference: Any = checked.models.model
        x = reference.avg_pool(x)
    args = (module.stride, module.padding, module.output_padding, module.dilation, module.groups)
    phases_ms = time_call(lambda: phases(x, module.weight, None, *args))  # as ModelNew calls it
    conv_ms = time_call(lambda: module(x))
    extra = f" phases_ms={phases_ms:.4f} conv_transpose_ms={conv_ms:.4f}"
    report("RULES_GPU", rel, KEY, result=result, extra=extra)
