"""The rules generator's kernel for the Robust-KBench layernorm sample, through the real evaluator on CUDA at
DEFAULT sizes (marker gpu).

    pytest -m gpu tests/gpu/test_rules_robust_kbench_gpu.py -s

The default configuration (batch 1, 64x256x256) is timed; all 7 other configurations are checked at full size
by `task_configs`. Prints `RKB_RULES_GPU recipe correct runtime_us speedup_eager_x` (information).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.importers.robust_kbench import scan
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.model import EvalRequest, Task
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

pytestmark = pytest.mark.gpu

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "robust_kbench"
KEY = "reduction_structure.single_pass_norm"


@pytest.fixture(scope="module")
def task() -> Task:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return scan(SAMPLE).tasks[0]


def test_rules_layer_norm_passes_every_config_on_cuda(task: Task) -> None:
    recipe = default_recipes()[KEY]
    candidate = recipe.emit(task_view(task), recipe.default_config)  # type: ignore[union-attr]
    request = EvalRequest(
        task_key=task.key, task_source=task.source, candidate_source=candidate, device="cuda",
        shape="default", candidate_kind="kernel", trials=3, extra_shapes=1, timeout_s=600,
    )  # fmt: skip
    result = SubprocessEvaluator().evaluate(request)
    print(f"RKB_RULES_GPU {KEY} {result.correct} {result.runtime_us} {result.speedup_eager_x}")
    assert result.correct, (result.error_kind, result.error_excerpt, result.checks)
    assert result.checks["task_configs"].startswith("pass: 7 configurations")
