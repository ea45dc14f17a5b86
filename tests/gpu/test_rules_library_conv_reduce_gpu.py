"""fusion.conv_reduction_epilogue kernels on CUDA at the tasks' DEFAULT sizes (marker gpu).

    pytest -m gpu tests/gpu/test_rules_library_conv_reduce_gpu.py -s     # -s prints the RULES_GPU lines

Each case: generate with the default config, build Model and ModelNew with the same seed on the GPU (identical
weights), TF32 off (cuDNN runs the same fp32 conv in both), run both on the task's own inputs and on a signed
copy with a mean offset (x * 6 - 3 + 10): allclose(1e-4, 1e-4); the state dicts (batch norm running statistics)
must agree after each forward. Batch norm tasks are also checked in eval mode. Then
`RULES_GPU task eager_ms kernel_ms speedup` (triton.testing.do_bench medians; information, not assertions).
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
    name = f"rules_conv_reduce_gpu_candidate_{abs(hash(source)) % 10**12}"
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


def _compare(model: Any, model_new: Any, inputs: list[torch.Tensor]) -> float:
    with torch.no_grad():
        expected = model(*inputs)
        got = model_new(*inputs)
    torch.cuda.synchronize()
    assert type(got) is torch.Tensor and got.shape == expected.shape and got.dtype == expected.dtype
    assert got.device.type == "cuda"
    err = (got - expected).abs().max().item()
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"max abs error {err}"
    ref_state, new_state = model.state_dict(), model_new.state_dict()
    for k in ref_state:  # batch norm running statistics are updated the same way
        assert torch.allclose(ref_state[k].float(), new_state[k].float(), rtol=1e-4, atol=1e-5), k
    return err


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
    has_batch_norm = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    worst = _compare(model, model_new, inputs)
    shifted = [x.mul(6).sub_(3).add_(10) if x.is_floating_point() else x for x in inputs]
    worst = max(worst, _compare(model, model_new, shifted))
    if has_batch_norm:
        model.eval()
        model_new.eval()
        worst = max(worst, _compare(model, model_new, inputs))
        model.train()
        model_new.train()
    del shifted
    with torch.no_grad():
        new_ms = triton.testing.do_bench(lambda: model_new(*inputs), return_mode="median")
        ref_ms = triton.testing.do_bench(lambda: model(*inputs), return_mode="median")
    return worst, new_ms, ref_ms


@pytest.mark.parametrize("rel", CASES, ids=[c.split("/")[1].split("_")[0] for c in CASES])
def test_rule_kernel_matches_reference_on_cuda_at_default_sizes(rel: str, tmp_path: Path) -> None:
    task = make_task(rel)
    recipe = default_recipes()[KEY]
    source = recipe.emit(task_view(task), recipe.default_config)  # type: ignore[arg-type]
    err, new_ms, ref_ms = run_case(task, source, tmp_path)
    print(
        f"\nRULES_GPU {rel} {KEY} eager_ms={ref_ms:.4f} kernel_ms={new_ms:.4f} speedup={ref_ms / new_ms:.3f}x"
        f" max_abs_err={err:.2e}"
    )
