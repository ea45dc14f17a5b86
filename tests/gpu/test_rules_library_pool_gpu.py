"""Pooling (and rewrite) rule kernels on CUDA at the tasks' DEFAULT sizes (marker gpu: run on the GPU machine).

    pytest -m gpu tests/gpu/test_rules_library_pool_gpu.py -s     # -s prints the RULES_GPU lines

Each case: generate with the recipe's default config, build Model and ModelNew with the same seed on the GPU
(weights must be identical), run both on the task's own inputs and on a signed copy (x * 6 - 3),
allclose(1e-4, 1e-4), TF32 off. Timings (triton.testing.do_bench median, ms) are printed, not asserted:
    RULES_GPU <task> <recipe> eager_ms=<..> kernel_ms=<..> speedup=<eager/kernel>x max_abs_err=<..>
"""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.rules.recipes.tuning import POOL_LADDER
from tests.gpu.rules_gpu_support import FP32_STRICT, GPU_MARKS, generate, make_task, report, run_case

POOL = "data_reuse.pooling_window_reuse"
CASES = [
    ("level1/42_Max_Pooling_2D.py", POOL),
    ("level1/44_Average_Pooling_1D.py", POOL),
    ("level1/46_Average_Pooling_3D.py", POOL),
    ("level2/46_Conv2d_Subtract_Tanh_Subtract_AvgPool.py", POOL),
    ("level2/50_ConvTranspose3d_Scaling_AvgPool_BiasAdd_Scaling.py", POOL),
    ("level2/74_ConvTranspose3d_LeakyReLU_Multiply_LeakyReLU_Max.py", POOL),
    ("level2/82_Conv2d_Tanh_Scaling_BiasAdd_Max.py", POOL),
    ("level1/12_Matmul_with_diagonal_matrices_.py", "algebraic_rewrite.diag_matmul_as_broadcast"),
    ("level2/40_Matmul_Scaling_ResidualAdd.py", "algebraic_rewrite.drop_noops"),
    ("level2/20_ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd.py", "algebraic_rewrite.drop_noops"),
]

pytestmark = [*GPU_MARKS, FP32_STRICT]


@pytest.mark.parametrize(("rel", "key"), CASES, ids=[c[0].split("/")[1][:-3] for c in CASES])
def test_library_pool_kernel_matches_reference_on_cuda(rel: str, key: str, tmp_path: Path) -> None:
    task = make_task(rel)
    source = generate(task, key)
    report("RULES_GPU", rel, key, result=run_case(task, source, tmp_path))


@pytest.mark.parametrize(
    "rel", ["level1/42_Max_Pooling_2D.py", "level2/82_Conv2d_Tanh_Scaling_BiasAdd_Max.py"]
)
def test_every_pool_tuning_config_is_correct_on_cuda(rel: str, tmp_path: Path) -> None:
    task = make_task(rel)
    for config in POOL_LADDER:
        source = generate(task, POOL, config)
        r = run_case(task, source, tmp_path)
        print(
            f"\nRULES_GPU_TUNE {rel} {POOL} {config} eager_ms={r.eager_ms:.4f} kernel_ms={r.kernel_ms:.4f}"
            f" max_abs_err={r.max_abs_err:.2e}"
        )
