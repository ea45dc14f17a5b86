"""The implicit-GEMM convolution that benchmarks/smoke_eval_cost.py times passes the real CPU evaluator.

benchmarks/candidates/triton_conv2d_implicit_gemm.py is a hand-written Triton convolution for KernelBench
level1/50 (AlexNet's first layer); the smoke-cost table in the README is measured on it, so it must stay a
correct kernel: evaluated here as `htam-graph eval --device cpu --shape smoke` does (Triton interpreter, the
task's smoke variant and one extra shape, rtol=atol=1e-4, every check of the worker).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from htam_graph.kernels_runtime.parent.corpus import candidate_task
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.model import EvalRequest, Language

REPO = Path(__file__).resolve().parents[2]
KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
TORCH_CONV = re.compile(r"\b(F|torch|functional|nn)\.conv|self\.conv1\(|_convolution")
CANDIDATE = REPO / "benchmarks" / "candidates" / "triton_conv2d_implicit_gemm.py"


def test_implicit_gemm_conv_candidate_is_correct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    source = CANDIDATE.read_text(encoding="utf-8")
    task = candidate_task(source)
    assert task == "level1/50_conv_standard_2D__square_input__square_kernel.py"
    task_source = (KB / task).read_text(encoding="utf-8")
    forward = source.split("def forward", 1)[1]
    assert not TORCH_CONV.search(forward), "the forward must compute the convolution in its own kernel"
    request = EvalRequest(task_key=task, task_source=task_source, candidate_source=source, device="cpu",
                          shape="smoke", trials=2, extra_shapes=1, timing_runs=1, warmup_runs=1,
                          timeout_s=300)  # fmt: skip
    result = SubprocessEvaluator(cache_dir=tmp_path).evaluate(request)
    assert result.correct, (result.error_kind, result.error_excerpt, result.checks)
    assert result.language is Language.TRITON and result.compiled
    assert result.checks["kernel_launched"].startswith("pass")
    assert result.checks["extra_shapes"].startswith("pass")
    assert result.checks["correctness"].startswith("pass")
    assert result.max_abs_err is not None and result.max_abs_err < 1e-4
