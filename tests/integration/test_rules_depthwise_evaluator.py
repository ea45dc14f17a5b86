"""Direct depthwise conv rule kernels through the real SubprocessEvaluator (CPU, smoke sizes, TRITON_INTERPRET=1).

The evaluator runs the candidate in a child process with its own defences (static checks, poisoned memory,
input-mutation checks, kernel-launch counting, several trials with fresh inputs) and its own fp32 1e-4 check.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.kernels_runtime.evaluator import SubprocessEvaluator
from htam_graph.model import EvalRequest, Task
from htam_graph.rules import KernelConfig
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

KB = Path(__file__).resolve().parents[2].parent / "shared" / "kernelbench"
KEY = "data_reuse.depthwise_conv_direct"

pytestmark = pytest.mark.skipif(
    not KB.is_dir(), reason="no KernelBench checkout beside the checkout (../shared/kernelbench)"
)


@pytest.mark.parametrize(
    "rel",
    [
        "level1/82_conv_depthwise_2D_square_input_square_kernel.py",
        "level1/84_conv_depthwise_2D_asymmetric_input_square_kernel.py",
        "level1/86_conv_depthwise_separable_2D.py",
    ],
)
def test_depthwise_kernel_is_correct_in_the_real_evaluator(rel: str) -> None:
    source = (KB / rel).read_text(encoding="utf-8")
    task = Task(
        key=f"kernelbench/{rel[:-3]}",
        suite="kernelbench",
        level=None,
        name=rel,
        source=source,
        source_sha256="0" * 64,
    )
    # large tiles: the interpreter runs few programs; the code is otherwise the default one
    candidate = default_recipes()[KEY].emit(task_view(task), KernelConfig(block=8192, num_warps=8))  # type: ignore[arg-type]
    request = EvalRequest(
        task_key=task.key,
        task_source=source,
        candidate_source=candidate,
        device="cpu",
        shape="smoke",
        candidate_kind="kernel",
        trials=3,
        extra_shapes=0,
        timing_runs=1,
        warmup_runs=0,
        measure_baselines=False,
        timeout_s=600,
    )
    result = SubprocessEvaluator().evaluate(request)
    assert result.error_kind is None, result.error_excerpt
    assert result.compiled and result.correct
    assert result.checks["kernel_launched"].startswith("pass")
    assert result.checks["static_source"].startswith("pass")
