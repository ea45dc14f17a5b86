"""Loss (full reduction) and scan rule kernels on CUDA at the tasks' DEFAULT sizes (marker gpu).

    pytest -m gpu tests/gpu/test_rules_library_loss_scan_gpu.py -s     # -s prints the RULES_GPU lines

Each case: generate with the default config, build Model and ModelNew on the GPU (same seed), TF32 off, run both on the
task's own inputs and on a second draw of them (another seed): allclose(1e-4, 1e-4). The loss kernels must
also be bit-exact across two runs (fixed-order combine, no atomics). Then
`RULES_GPU task recipe eager_ms kernel_ms speedup` (triton.testing.do_bench medians; information only).
The scans are also run with the task's `dim` overridden to 0 (strided scan dim: the columns kernel). The task's
own cumprod inputs (rand in [0, 1)) underflow to exact zeros after ~120 elements, so cumprod is also checked on
inputs near 1 (1 + (x - 0.5) * 1e-4: products of 32768 factors stay ~1, every column is meaningful).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from htam_graph.model import Task
from htam_graph.rules.recipes.tuning import LOSS_LADDER
from tests.gpu.rules_gpu_support import (
    FP32_STRICT,
    GPU_MARKS,
    CaseResult,
    Checked,
    Comparison,
    build_models,
    compare_outputs,
    draw_inputs,
    generate,
    make_task,
    report,
    run_both,
    time_checked,
)

LOSS = "fusion.pointwise_into_reduction"
SCAN = "reduction_structure.block_scan"
NEAR_ONE = "near_one"
# (task, recipe, module-constant overrides, input transform)
CASES: list[tuple[str, str, dict[str, Any], str]] = [
    ("level1/94_MSELoss.py", LOSS, {}, ""),
    ("level1/96_HuberLoss.py", LOSS, {}, ""),
    ("level1/98_KLDivLoss.py", LOSS, {}, ""),
    ("level1/100_HingeLoss.py", LOSS, {}, ""),
    ("level1/90_cumprod.py", SCAN, {}, ""),
    ("level1/92_cumsum_exclusive.py", SCAN, {}, ""),
    ("level1/90_cumprod.py", SCAN, {}, NEAR_ONE),
    ("level1/90_cumprod.py", SCAN, {"dim": 0}, NEAR_ONE),
    ("level1/92_cumsum_exclusive.py", SCAN, {"dim": 0}, ""),
]

pytestmark = [*GPU_MARKS, FP32_STRICT]


def run_case(
    task: Task,
    candidate_source: str,
    directory: Path,
    overrides: dict[str, Any],
    deterministic: bool,
    transform: str = "",
) -> CaseResult:
    """Check ModelNew against Model on CUDA on two draws of the inputs (seeds 1 and 2, drawn on the host);
    `deterministic`: a second ModelNew run must be bit-identical. Then time both."""
    models = build_models(task, candidate_source, directory, overrides=overrides)
    worst = Comparison()
    for seed in (1, 2):
        inputs = draw_inputs(models.ref_mod, seed=seed, on_host=True)
        if transform == NEAR_ONE:
            inputs = [1 + (x - 0.5) * 1e-4 for x in inputs]
        expected, got = run_both(models.model, models.model_new, inputs)
        with torch.no_grad():
            again = models.model_new(*inputs) if deterministic else got
        worst = worst.worst(compare_outputs(got, expected))
        assert torch.equal(got, again), (
            "two runs on the same inputs differ (the combine is not deterministic)"
        )
        del expected, got, again
    return time_checked(Checked(models, inputs, worst))


# Measured on the H200 (2026-11-29): a 32768-term cumprod of values near 1 along dim 0 differs from torch's by
# 2.45e-4 (> 1e-4); the task's own inputs (and dim=-1 near 1) pass. Strict xfail pins it.
_NEAR_ONE_DIM0 = ("level1/90_cumprod.py", SCAN, {"dim": 0}, NEAR_ONE)


@pytest.mark.parametrize(
    ("rel", "key", "overrides", "transform"),
    [
        pytest.param(*c, marks=pytest.mark.xfail(strict=True, reason="H200: max abs err 2.45e-4 > 1e-4"))
        if c == _NEAR_ONE_DIM0
        else c
        for c in CASES
    ],
    ids=[c[0].split("/")[1][:-3] + "".join(f"-{k}{v}" for k, v in c[2].items()) + f"-{c[3]}" for c in CASES],
)
def test_rule_kernel_matches_reference_on_cuda_at_default_sizes(
    rel: str, key: str, overrides: dict[str, Any], transform: str, tmp_path: Path
) -> None:
    task = make_task(rel)
    source = generate(task, key)
    result = run_case(task, source, tmp_path, overrides, key == LOSS, transform)
    report("RULES_GPU", rel, overrides or "", transform, key, result=result)


@pytest.mark.parametrize("rel", [c[0] for c in CASES if c[1] == LOSS])
def test_every_loss_tuning_config_is_correct_and_deterministic_on_cuda(rel: str, tmp_path: Path) -> None:
    """Each LOSS_LADDER configuration (tile size, warps, stage-1 program count) passes the same checks; its time
    is printed as `RULES_GPU_TUNE` for comparison with the default's `RULES_GPU` line."""
    task = make_task(rel)
    for config in LOSS_LADDER:
        r = run_case(task, generate(task, LOSS, config), tmp_path, {}, True)
        print(
            f"\nRULES_GPU_TUNE {rel} {config} max_abs_err={r.max_abs_err:.2e} kernel_ms={r.kernel_ms:.4f}"
            f" eager_ms={r.eager_ms:.4f}"
        )
