"""The Robust-KBench layernorm sample through the real evaluator on CUDA at DEFAULT sizes (marker gpu).

    pytest -m gpu tests/gpu/test_tasks_robust_kbench_gpu.py -s

The default configuration (batch 1, 64x256x256, random init) is timed; all 7 other configurations (batch 8,
1 or 64 features, standard init) are checked at their full sizes by `task_configs`. The one-row kernel (right at
batch 1 only) must be a mismatch naming `multi5`; the per-sample kernel and the reference must pass. Prints
`RKB_GPU kind correct runtime_us speedup_eager_x` (information, not assertions).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from htam_graph.importers.robust_kbench import scan
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.model import ErrorKind, EvalRequest, EvalResult, Task
from htam_graph.state import reference_as_candidate

pytestmark = pytest.mark.gpu

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "robust_kbench"


def _kernels() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "integration" / "test_tasks_robust_kbench_eval.py"
    spec = importlib.util.spec_from_file_location("rkb_eval_kernels", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("rkb_eval_kernels", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def task() -> Task:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return scan(SAMPLE).tasks[0]


def _eval(task: Task, candidate: str, kind: str = "kernel") -> EvalResult:
    request = EvalRequest(
        task_key=task.key, task_source=task.source, candidate_source=candidate, device="cuda",
        shape="default", candidate_kind=kind, trials=3, extra_shapes=1, timeout_s=600,  # type: ignore[arg-type]
    )  # fmt: skip
    result = SubprocessEvaluator().evaluate(request)
    print(f"RKB_GPU {kind} {result.correct} {result.runtime_us} {result.speedup_eager_x}")
    return result


def test_one_row_kernel_fails_a_config_per_sample_kernel_passes(task: Task) -> None:
    kernels = _kernels()
    bad = _eval(task, kernels.ONE_ROW)
    assert bad.error_kind is ErrorKind.MISMATCH and "config multi5" in bad.error_excerpt, bad.error_excerpt
    good = _eval(task, kernels.PER_SAMPLE)
    assert good.correct, (good.error_kind, good.error_excerpt, good.checks)
    assert good.checks["task_configs"].startswith("pass: 7 configurations")


def test_reference_passes_every_config_on_cuda(task: Task) -> None:
    result = _eval(task, reference_as_candidate(task.source), kind="reference")
    assert result.correct and result.checks["task_configs"].startswith("pass")
