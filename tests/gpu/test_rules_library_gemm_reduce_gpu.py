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

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from htam_graph.kernels_runtime.taskmod import load_task_module
from htam_graph.model import Task
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

KB = Path(__file__).resolve().parents[2].parent / "shared" / "kernelbench"
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

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not KB.is_dir(), reason="no KernelBench checkout"),
]


@pytest.fixture(autouse=True)
def _fp32_strict() -> Iterator[None]:
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    torch.cuda.empty_cache()


def make_task(rel: str) -> Task:
    source = (KB / rel).read_text(encoding="utf-8")
    return Task(
        key=f"kernelbench/{rel[:-3]}",
        suite="kernelbench",
        level=None,
        name=rel,
        source=source,
        source_sha256="0" * 64,
    )


def import_candidate(source: str, directory: Path) -> Any:
    name = f"rules_gemm_reduce_gpu_candidate_{abs(hash(source)) % 10**12}"
    path = directory / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def run_case(task: Task, candidate_source: str, directory: Path) -> tuple[float, float, float, float]:
    """Check ModelNew against Model on CUDA; return (max abs error, err / tol, ModelNew ms, Model ms)."""
    import triton.testing

    ref_mod = load_task_module(task.source, "reference", {})
    cand = import_candidate(candidate_source, directory)
    init = list(ref_mod.get_init_inputs())
    with torch.device("cuda"):
        torch.manual_seed(0)
        model = ref_mod.Model(*init)
        torch.manual_seed(0)
        model_new = cand.ModelNew(*init)
        torch.manual_seed(1)
        inputs = list(ref_mod.get_inputs())
    ref_state, new_state = model.state_dict(), model_new.state_dict()
    assert list(ref_state) == list(new_state)
    assert all(torch.equal(ref_state[k], new_state[k]) for k in ref_state)
    worst, ratio = 0.0, 0.0
    for trial in range(2):
        if trial == 1:
            inputs = [x.mul_(6).sub_(3).add_(10) if x.is_floating_point() else x for x in inputs]
        with torch.no_grad():
            torch.manual_seed(10 + trial)
            expected = model(*inputs)
            torch.manual_seed(10 + trial)
            got = model_new(*inputs)
        torch.cuda.synchronize()
        assert type(got) is torch.Tensor and got.shape == expected.shape and got.dtype == expected.dtype
        assert got.device.type == "cuda"
        diff = (got - expected).abs()
        worst = max(worst, diff.max().item())
        ratio = max(ratio, (diff / (1e-4 + 1e-4 * expected.abs())).max().item())
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"max abs error {worst}, err/tol {ratio}"
        del expected, got, diff
    with torch.no_grad():
        new_ms = triton.testing.do_bench(lambda: model_new(*inputs), return_mode="median")
        ref_ms = triton.testing.do_bench(lambda: model(*inputs), return_mode="median")
    return worst, ratio, new_ms, ref_ms


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
    recipe = default_recipes()[key]
    source = recipe.emit(task_view(task), recipe.default_config)  # type: ignore[arg-type]
    err, ratio, new_ms, ref_ms = run_case(task, source, tmp_path)
    print(
        f"\nRULES_GPU {rel} {key} eager_ms={ref_ms:.4f} kernel_ms={new_ms:.4f} speedup={ref_ms / new_ms:.3f}x"
        f" max_abs_err={err:.2e} err_over_tol={ratio:.3f}"
    )
