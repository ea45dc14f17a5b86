"""Pooling (and rewrite) rule kernels on CUDA at the tasks' DEFAULT sizes (marker gpu: run on the GPU machine).

    pytest -m gpu tests/gpu/test_rules_library_pool_gpu.py -s     # -s prints the RULES_GPU lines

Each case: generate with the recipe's default config, build Model and ModelNew with the same seed on the GPU
(weights must be identical), run both on the task's own inputs and on a signed copy (x * 6 - 3),
allclose(1e-4, 1e-4), TF32 off. Timings (triton.testing.do_bench median, ms) are printed, not asserted:
    RULES_GPU <task> <recipe> eager_ms=<..> kernel_ms=<..> speedup=<eager/kernel>x max_abs_err=<..>
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from htam_graph.kernels_runtime.worker.taskmod import load_task_module
from htam_graph.model import Task
from htam_graph.rules.recipes.tuning import POOL_LADDER
from tests.gpu.rules_gpu_support import (
    FP32_STRICT,
    GPU_MARKS,
    generate,
    import_candidate,
    make_task,
    report,
    run_case,
)

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


# ------------------------------------------------- edge cases of the rows x W-blocks layout, compiled for CUDA
EDGE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, *window):
        super().__init__()
        self.pool = nn.{pool}(*window)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn({shape})]


def get_init_inputs():
    return [{init}]
"""
EDGE_CASES = [
    # a row of 5000 outputs: several W blocks at every ladder BLOCK, ceil_mode's clipped last window
    ("AvgPool1d", "2, 3, 5003", [(8, 1, 4, True, True), (5, 3, 2, True, False)]),
    # rows shorter than BLOCK (several rows per program), padded D/H rows, divisor_override
    (
        "AvgPool3d",
        "2, 3, 9, 10, 37",
        [(3, 2, 1, True, False, None), ((2, 3, 2), (1, 2, 3), 1, False, True, 7)],
    ),
    ("MaxPool2d", "2, 3, 33, 517", [(4, 1, 1, 1), (3, 2, 1, 2, False, True)]),
]


@pytest.mark.parametrize(("pool", "shape", "inits"), EDGE_CASES, ids=[c[0] for c in EDGE_CASES])
def test_pool_layout_edge_cases_on_cuda(
    pool: str, shape: str, inits: list[tuple[Any, ...]], tmp_path: Path
) -> None:
    source = EDGE.format(pool=pool, shape=shape, init=", ".join(map(repr, inits[0])))
    task = Task(key=f"synthetic/{pool}", suite="kernelbench", level=None, name=pool, source=source,
                source_sha256="0" * 64)  # fmt: skip
    ref_mod = load_task_module(source, "reference", {})
    for config in POOL_LADDER:
        module = import_candidate(generate(task, POOL, config), tmp_path)
        for init in inits:
            torch.manual_seed(1)
            x = torch.randn(*map(int, shape.split(", ")), device="cuda") * 6 - 3
            if pool.startswith("Max"):
                x[0, 0, 1, 3] = float("nan")  # PyTorch's max pooling propagates NaN
                x[1, 2, :4] = float("-inf")
            expected = ref_mod.Model(*init).cuda()(x)
            got = module.ModelNew(*init).cuda()(x)
            assert got.shape == expected.shape and got.dtype == expected.dtype
            err = (got - expected).abs().nan_to_num().max().item()
            assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4, equal_nan=True), (
                pool,
                init,
                config,
                err,
            )
            if pool.startswith("Max"):
                assert expected.isnan().any() and torch.equal(got.isnan(), expected.isnan())
