"""Norm / reduction / softmax-over-dim rule kernels on CUDA at the tasks' DEFAULT sizes (marker gpu).

    pytest -m gpu tests/gpu/test_rules_library_norm_gpu.py -s     # -s prints the RULES_GPU lines

Each case: generate with the default config, build Model and ModelNew with the same seed on the GPU (identical
weights), TF32 off, run both on the task's own inputs and on a signed copy with a mean offset (x * 6 - 3 + 10):
allclose(1e-4, 1e-4), exact for argmin indices. Then `RULES_GPU task recipe eager_ms kernel_ms speedup`
(triton.testing.do_bench medians; information, not assertions). The ladder test checks every tuning config.
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
from htam_graph.rules.recipes.tuning import REDUCE_LADDER

KB = Path(__file__).resolve().parents[2].parent / "shared" / "kernelbench"
NORM = "reduction_structure.single_pass_norm"
DIM = "reduction_structure.dim_reduction"
LSE = "reduction_structure.online_logsumexp"
CASES = [
    ("level1/34_InstanceNorm.py", NORM),
    ("level1/36_RMSNorm_.py", NORM),
    ("level1/38_L1Norm_.py", NORM),
    ("level1/40_LayerNorm.py", NORM),
    ("level2/30_Gemm_GroupNorm_Hardtanh.py", NORM),
    ("level2/34_ConvTranspose3d_LayerNorm_GELU_Scaling.py", NORM),
    ("level2/60_ConvTranspose3d_Swish_GroupNorm_HardSwish.py", NORM),
    ("level2/62_Matmul_GroupNorm_LeakyReLU_Sum.py", NORM),
    ("level2/88_Gemm_GroupNorm_Swish_Multiply_Swish.py", NORM),
    ("level2/94_Gemm_BiasAdd_Hardtanh_Mish_GroupNorm.py", NORM),
    ("level1/48_Mean_reduction_over_a_dimension.py", DIM),
    ("level1/52_Argmin_over_a_dimension.py", DIM),
    ("level2/56_Matmul_Sigmoid_Sum.py", DIM),
    ("level1/24_LogSoftmax.py", LSE),
    ("level2/22_Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish.py", LSE),
    ("level2/58_ConvTranspose3d_LogSumExp_HardSwish_Subtract_Clamp.py", LSE),
    ("level2/64_Gemm_LogSumExp_LeakyReLU_LeakyReLU_GELU_GELU.py", LSE),
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
    name = f"rules_norm_gpu_candidate_{abs(hash(source)) % 10**12}"
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


def run_case(task: Task, candidate_source: str, directory: Path) -> tuple[float, float, float]:
    """Check ModelNew against Model on CUDA; return (max abs error, ModelNew ms, Model ms)."""
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
    worst = 0.0
    for trial in range(2):
        if trial == 1:
            inputs = [x.mul_(6).sub_(3).add_(10) if x.is_floating_point() else x for x in inputs]
        with torch.no_grad():
            expected = model(*inputs)
            got = model_new(*inputs)
        torch.cuda.synchronize()
        assert type(got) is torch.Tensor and got.shape == expected.shape and got.dtype == expected.dtype
        assert got.device.type == "cuda"
        if not expected.is_floating_point():
            assert torch.equal(got, expected), "indices differ"
        else:
            err = (got - expected).abs().max().item()
            assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"max abs error {err}"
            worst = max(worst, err)
        del expected, got
    with torch.no_grad():
        new_ms = triton.testing.do_bench(lambda: model_new(*inputs), return_mode="median")
        ref_ms = triton.testing.do_bench(lambda: model(*inputs), return_mode="median")
    return worst, new_ms, ref_ms


@pytest.mark.parametrize(("rel", "key"), CASES, ids=[c[0].split("/")[1][:-3] for c in CASES])
def test_rule_kernel_matches_reference_on_cuda_at_default_sizes(rel: str, key: str, tmp_path: Path) -> None:
    task = make_task(rel)
    recipe = default_recipes()[key]
    source = recipe.emit(task_view(task), recipe.default_config)  # type: ignore[arg-type]
    err, new_ms, ref_ms = run_case(task, source, tmp_path)
    print(
        f"\nRULES_GPU {rel} {key} eager_ms={ref_ms:.4f} kernel_ms={new_ms:.4f} speedup={ref_ms / new_ms:.3f}x"
        f" max_abs_err={err:.2e}"
    )


@pytest.mark.parametrize(
    ("rel", "key"),
    [
        ("level1/40_LayerNorm.py", NORM),
        ("level1/36_RMSNorm_.py", NORM),
        ("level1/52_Argmin_over_a_dimension.py", DIM),
        ("level2/58_ConvTranspose3d_LogSumExp_HardSwish_Subtract_Clamp.py", LSE),
    ],
)
def test_every_tuning_config_is_correct_on_cuda(rel: str, key: str, tmp_path: Path) -> None:
    task = make_task(rel)
    for config in REDUCE_LADDER:
        source = default_recipes()[key].emit(task_view(task), config)  # type: ignore[arg-type]
        err, new_ms, ref_ms = run_case(task, source, tmp_path)
        print(
            f"\nRULES_GPU_TUNE {rel} {config} max_abs_err={err:.2e} kernel_ms={new_ms:.4f} eager_ms={ref_ms:.4f}"
        )
