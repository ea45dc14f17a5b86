"""conv_transpose_as_conv kernels through the real SubprocessEvaluator (CPU, smoke shapes, TRITON_INTERPRET=1).

The evaluator runs the candidate in a child process with its own defences (static checks, poisoned memory,
input-mutation checks, kernel-launch counting, several trials with fresh inputs). Every dev task with a
ConvTranspose that the recipe accepts: the fused-epilogue ones and the ones whose other ops are kept as they are.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from htam_graph.rules import KernelConfig
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

rev = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]("recipe_evaluation")
KB = rev.KB
KEY = "algebraic_rewrite.conv_transpose_as_conv"


TASKS = [
    "level1/58_conv_transposed_3D__asymmetric_input__asymmetric_kernel.py",
    "level1/64_conv_transposed_1D.py",
    "level1/68_conv_transposed_3D__square_input__asymmetric_kernel.py",
    "level1/70_conv_transposed_3D__asymmetric_input__square_kernel.py",
    "level1/72_conv_transposed_3D_asymmetric_input_asymmetric_kernel___strided_padded_grouped_.py",
    "level1/74_conv_transposed_1D_dilated.py",
    "level1/78_conv_transposed_2D_asymmetric_input_asymmetric_kernel___padded__.py",
    "level2/100_ConvTranspose3d_Clamp_Min_Divide.py",
    "level2/10_ConvTranspose2d_MaxPool_Hardtanh_Mean_Tanh.py",
    "level2/16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling.py",
    "level2/20_ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd.py",
    "level2/26_ConvTranspose3d_Add_HardSwish.py",
    "level2/2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide.py",
    "level2/34_ConvTranspose3d_LayerNorm_GELU_Scaling.py",
    "level2/36_ConvTranspose2d_Min_Sum_GELU_Add.py",
    "level2/38_ConvTranspose3d_AvgPool_Clamp_Softmax_Multiply.py",
    "level2/42_ConvTranspose2d_GlobalAvgPool_BiasAdd_LogSumExp_Sum_Multiply.py",
    "level2/44_ConvTranspose2d_Multiply_GlobalAvgPool_GlobalAvgPool_Mean.py",
    "level2/50_ConvTranspose3d_Scaling_AvgPool_BiasAdd_Scaling.py",
    "level2/58_ConvTranspose3d_LogSumExp_HardSwish_Subtract_Clamp.py",
    "level2/60_ConvTranspose3d_Swish_GroupNorm_HardSwish.py",
    "level2/72_ConvTranspose3d_BatchNorm_AvgPool_AvgPool.py",
    "level2/74_ConvTranspose3d_LeakyReLU_Multiply_LeakyReLU_Max.py",
    "level2/78_ConvTranspose3d_Max_Max_Sum.py",
    "level2/96_ConvTranspose3d_Multiply_Max_GlobalAvgPool_Clamp.py",
]


@pytest.mark.parametrize(
    "rel", TASKS, ids=[t.split("/")[1].split("_")[0] + "_" + t.split("/")[0] for t in TASKS]
)
def test_recipe_kernel_is_correct_in_the_real_evaluator(rel: str) -> None:
    task = rev.kb_task(rel)
    # large tiles: the interpreter runs few programs; the code is otherwise the default one
    candidate = default_recipes()[KEY].emit(task_view(task), KernelConfig(block=8192, num_warps=8))
    rev.assert_correct_in_real_evaluator(task, candidate)
