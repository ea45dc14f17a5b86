"""Rule-generated Triton kernels on CUDA at the tasks' DEFAULT sizes (marker gpu: run on the GPU machine).

    pytest -m gpu tests/gpu/test_rules_gpu.py -s     # -s prints the timing table

Each case: generate with the default config, build Model and ModelNew with the same seed on the GPU (weights
must be identical), run both on the task's own inputs and on a signed copy (x * 6 - 3), allclose(1e-4, 1e-4),
TF32 off. The printed timings (triton.testing.do_bench median, ms) are information, not assertions.
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
from htam_graph.rules import KernelConfig
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes
from htam_graph.rules.recipes.tuning import ELEMENTWISE_LADDER, ROW_LADDER, VECTOR_LADDER

KB = Path(__file__).resolve().parents[2].parent / "shared" / "kernelbench"
ELEMENTWISE = [
    "20_LeakyReLU",
    "22_Tanh",
    "26_GELU_",
    "28_HardSigmoid",
    "30_Softsign",
    "32_HardTanh",
    "88_MinGPTNewGelu",
]
EPILOGUE = [
    "100_ConvTranspose3d_Clamp_Min_Divide",
    "12_Gemm_Multiply_LeakyReLU",
    "16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling",
    "26_ConvTranspose3d_Add_HardSwish",
    "2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide",
    "48_Conv3d_Scaling_Tanh_Multiply_Sigmoid",
    "4_Conv2d_Mish_Mish",
    "54_Conv2d_Multiply_LeakyReLU_GELU",
    "68_Matmul_Min_Subtract",
    "70_Gemm_Sigmoid_Scaling_ResidualAdd",
    "76_Gemm_Add_ReLU",
    "86_Matmul_Divide_GELU",
    "90_Conv3d_LeakyReLU_Sum_Clamp_GELU",
]
CASES = (
    [(f"level1/{t}.py", "fusion.elementwise_chain") for t in ELEMENTWISE]
    + [(f"level2/{t}.py", "fusion.library_epilogue") for t in EPILOGUE]
    + [("level1/24_LogSoftmax.py", "reduction_structure.row_softmax")]
)

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
    name = f"rules_gpu_candidate_{abs(hash(source)) % 10**12}"
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


def run_case(
    task: Task, candidate_source: str, directory: Path, overrides: dict[str, Any] | None = None
) -> tuple[float, float, float]:
    """Check ModelNew against Model on CUDA; return (max abs error, ModelNew ms, Model ms)."""
    import triton.testing

    ref_mod = load_task_module(task.source, "reference", overrides or {})
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
    assert list(ref_state) == list(new_state) and all(
        torch.equal(ref_state[k], new_state[k]) for k in ref_state
    )
    worst = 0.0
    for trial in range(2):
        if trial == 1:
            inputs = [x.mul_(6).sub_(3) if x.is_floating_point() else x for x in inputs]
        with torch.no_grad():
            expected = model(*inputs)
            got = model_new(*inputs)
        torch.cuda.synchronize()
        assert type(got) is torch.Tensor and got.shape == expected.shape and got.dtype == expected.dtype
        assert got.device.type == "cuda"
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
    source = recipe.emit(task_view(task), recipe.default_config)
    err, new_ms, ref_ms = run_case(task, source, tmp_path)
    print(
        f"\nRULES_GPU {rel} {key} max_abs_err={err:.2e} rules_ms={new_ms:.4f} eager_ms={ref_ms:.4f} speedup={ref_ms / new_ms:.3f}x"
    )


@pytest.mark.parametrize(
    ("rel", "key", "ladder"),
    [
        ("level1/88_MinGPTNewGelu.py", "fusion.elementwise_chain", ELEMENTWISE_LADDER),
        ("level2/76_Gemm_Add_ReLU.py", "fusion.library_epilogue", VECTOR_LADDER),
        ("level1/24_LogSoftmax.py", "reduction_structure.row_softmax", ROW_LADDER),
    ],
)
def test_every_tuning_config_is_correct_on_cuda(
    rel: str, key: str, ladder: tuple[KernelConfig, ...], tmp_path: Path
) -> None:
    task = make_task(rel)
    for config in ladder:
        source = default_recipes()[key].emit(task_view(task), config)
        err, new_ms, ref_ms = run_case(task, source, tmp_path)
        print(
            f"\nRULES_GPU_TUNE {rel} {config} max_abs_err={err:.2e} rules_ms={new_ms:.4f} eager_ms={ref_ms:.4f}"
        )


def test_more_than_2_pow_31_elements_uses_64_bit_offsets(tmp_path: Path) -> None:
    # 5462 x 393216 = 2_147_745_792 elements > 2**31 - 1: int32 offsets would wrap and corrupt the tail.
    task = make_task("level1/22_Tanh.py")
    source = default_recipes()["fusion.elementwise_chain"].emit(task_view(task), KernelConfig())
    ref_mod = load_task_module(task.source, "reference", {"batch_size": 5462})
    cand = import_candidate(source, tmp_path)
    x = torch.empty(5462, 393216, device="cuda").uniform_(-3, 3)
    got = cand.ModelNew()(x)
    expected = ref_mod.Model()(x)
    assert got.numel() > 2**31 - 1
    assert torch.allclose(got[-2:], expected[-2:], rtol=1e-4, atol=1e-4)  # the tail is where int32 would wrap
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4)
