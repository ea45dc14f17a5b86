"""Loss (full reduction) and scan rule kernels on CUDA at the tasks' DEFAULT sizes (marker gpu).

    pytest -m gpu tests/gpu/test_rules_library_loss_scan_gpu.py -s     # -s prints the RULES_GPU lines

Each case: generate with the default config, build Model and ModelNew on the GPU, TF32 off, run both on the
task's own inputs and on a second draw of them (another seed): allclose(1e-4, 1e-4). The loss kernels must
also be bit-exact across two runs (fixed-order combine, no atomics). Then
`RULES_GPU task recipe eager_ms kernel_ms speedup` (triton.testing.do_bench medians; information only).
The scans are also run with the task's `dim` overridden to 0 (strided scan dim: the columns kernel). The task's
own cumprod inputs (rand in [0, 1)) underflow to exact zeros after ~120 elements, so cumprod is also checked on
inputs near 1 (1 + (x - 0.5) * 1e-4: products of 32768 factors stay ~1, every column is meaningful).
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
    name = f"rules_loss_scan_gpu_candidate_{abs(hash(source)) % 10**12}"
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
    task: Task,
    candidate_source: str,
    directory: Path,
    overrides: dict[str, Any],
    deterministic: bool,
    transform: str = "",
) -> tuple[float, float, float]:
    """Check ModelNew against Model on CUDA; return (max abs error, ModelNew ms, Model ms)."""
    import triton.testing

    ref_mod = load_task_module(task.source, "reference", overrides)
    cand = import_candidate(candidate_source, directory)
    init = list(ref_mod.get_init_inputs())
    model, model_new = ref_mod.Model(*init).cuda(), cand.ModelNew(*init).cuda()
    worst = 0.0
    for seed in (1, 2):
        torch.manual_seed(seed)
        inputs = [x.cuda() for x in ref_mod.get_inputs()]
        if transform == NEAR_ONE:
            inputs = [1 + (x - 0.5) * 1e-4 for x in inputs]
        with torch.no_grad():
            expected = model(*inputs)
            got = model_new(*inputs)
            again = model_new(*inputs) if deterministic else got
        torch.cuda.synchronize()
        assert type(got) is torch.Tensor and got.shape == expected.shape and got.dtype == expected.dtype
        assert got.device.type == "cuda"
        err = (got - expected).abs().max().item()
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"max abs error {err}"
        assert torch.equal(got, again), (
            "two runs on the same inputs differ (the combine is not deterministic)"
        )
        worst = max(worst, err)
        del expected, got, again
    with torch.no_grad():
        new_ms = triton.testing.do_bench(lambda: model_new(*inputs), return_mode="median")
        ref_ms = triton.testing.do_bench(lambda: model(*inputs), return_mode="median")
    return worst, new_ms, ref_ms


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
    recipe = default_recipes()[key]
    source = recipe.emit(task_view(task), recipe.default_config)  # type: ignore[arg-type]
    err, new_ms, ref_ms = run_case(task, source, tmp_path, overrides, key == LOSS, transform)
    print(
        f"\nRULES_GPU {rel} {overrides or ''} {transform} {key} eager_ms={ref_ms:.4f} kernel_ms={new_ms:.4f}"
        f" speedup={ref_ms / new_ms:.3f}x max_abs_err={err:.2e}"
    )
