"""GEMM + row-reduction rule kernels on CUDA at the tasks' DEFAULT sizes (marker gpu).

    pytest -m gpu tests/gpu/test_rules_library_gemm_reduce_gpu.py -s     # -s prints the RULES_GPU lines

Recipes: fusion.reduction_with_epilogue (cuBLAS GEMM + one row kernel) and algebraic_rewrite.reduce_before_linear
(reduced weights + a narrower GEMM / GEMV + the row kernel). Each case: generate with the default config, build
Model and ModelNew with the same seed on the GPU (identical weights), TF32 off, run both (each forward right
after the same seed, so training-mode dropout draws the same mask) on the task's own inputs and on a signed
copy with a mean offset (x * 6 - 3 + 10): allclose(1e-4, 1e-4). Batch-norm models stay in training mode (as
KernelBench leaves them). Then `RULES_GPU task recipe eager_ms kernel_ms speedup max_abs_err err_over_tol`
(triton.testing.do_bench medians; information, not assertions). err_over_tol is max(|got - ref| / (1e-4 +
1e-4 |ref|)): how close to the tolerance a case is (level2/14's row sum is expected to be the closest).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gpu.rules_gpu_support import (
    FP32_STRICT,
    GPU_MARKS,
    CheckOptions,
    generate,
    make_task,
    report,
    run_case,
    signed_offset,
)

ROW = "fusion.reduction_with_epilogue"
GEMV = "algebraic_rewrite.reduce_before_linear"
# Measured on the H200 (2026-11-29, results/h200/rules_gpu/): these generated kernels exceed rtol=atol=1e-4 at
# default sizes. The loop rejects them as mismatches (negative evidence); strict xfail pins the measurement.
_FAILS_ON_H200 = {
    ("level2/14_Gemm_Divide_Sum_Scaling.py", ROW): "err/tol 5.5: the reference cancels (outputs ~3500, fp32 "
    "rounding ~4e-3); any other summation order misses 1e-4",
    (
        "level2/18_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp.py",
        GEMV,
    ): "err/tol 1.16 on the GPU (0.70 on the CPU): the reduced-weight GEMV reorders the sum",
}
CASES = [
    ("level2/14_Gemm_Divide_Sum_Scaling.py", ROW),
    ("level2/18_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp.py", ROW),
    ("level2/28_BMM_InstanceNorm_Sum_ResidualAdd_Multiply.py", ROW),
    ("level2/66_Matmul_Dropout_Softmax.py", ROW),
    ("level2/80_Gemm_Max_Subtract_GELU.py", ROW),
    ("level2/84_Gemm_BatchNorm_Scaling_Softmax.py", ROW),
    ("level2/98_Matmul_AvgPool_GELU_Scale_Max.py", ROW),
    ("level2/22_Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish.py", ROW),
    ("level2/56_Matmul_Sigmoid_Sum.py", ROW),  # 32768-wide rows: the widest row held in registers
    ("level2/64_Gemm_LogSumExp_LeakyReLU_LeakyReLU_GELU_GELU.py", ROW),
    ("level2/18_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp.py", GEMV),
    ("level2/98_Matmul_AvgPool_GELU_Scale_Max.py", GEMV),
]

# a signed copy with a mean offset; each forward right after the same seed (dropout draws the same mask);
# err/tol measured for the report
CHECKS = CheckOptions(transform=signed_offset, forward_seeds=True, measure_err_over_tol=True)

pytestmark = [*GPU_MARKS, FP32_STRICT]


@pytest.mark.parametrize(
    ("rel", "key"),
    [
        pytest.param(*c, marks=pytest.mark.xfail(strict=True, reason=_FAILS_ON_H200[c]))
        if c in _FAILS_ON_H200
        else c
        for c in CASES
    ],
    ids=[f"{c[0].split('/')[1][:2]}-{c[1].split('.')[0]}" for c in CASES],
)
# level2/28's reference warns (InstanceNorm2d num_features != channels, affine=False): the task's own quirk
@pytest.mark.filterwarnings("ignore:input's size at dim=1 does not match num_features")
def test_rule_kernel_matches_reference_on_cuda_at_default_sizes(rel: str, key: str, tmp_path: Path) -> None:
    task = make_task(rel)
    source = generate(task, key)
    result = run_case(task, source, tmp_path, CHECKS)
    report("RULES_GPU", rel, key, result=result, extra=f" err_over_tol={result.err_over_tol:.3f}")
