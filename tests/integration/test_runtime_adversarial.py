"""Every CPU-capable adversarial candidate is rejected on the CPU with the expected error kind and check.

The corpus (tests/data/adversarial) targets level1 tasks of the KernelBench dev split; here the tasks run with
their sizes reduced (`corpus.shrink_task`) so the Triton interpreter gets through each in seconds. The GPU run
(tests/gpu, scripts/gpu_runtime_check.py) uses the real default sizes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from htam_graph.kernels_runtime.parent.corpus import CPU_TEST_SIZES, load_corpus, shrink_task
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.model import EvalRequest

DATA = Path(__file__).resolve().parents[1] / "data"
KERNELBENCH = Path(
    os.environ.get("HTAM_KERNELBENCH", str(Path(__file__).resolve().parents[1] / "data" / "kernelbench"))
)
CORPUS = load_corpus(DATA / "adversarial")


def _task_source(task: str) -> str:
    path = KERNELBENCH / task
    if not path.exists():
        pytest.skip(f"KernelBench task {task} not available here")
    return shrink_task(path.read_text(encoding="utf-8"), CPU_TEST_SIZES[task])


def test_corpus_is_complete() -> None:
    assert len(CORPUS) >= 15
    assert all(e.task in CPU_TEST_SIZES for e in CORPUS)


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory: pytest.TempPathFactory) -> SubprocessEvaluator:
    return SubprocessEvaluator(cache_dir=tmp_path_factory.mktemp("runtime-cache"))


@pytest.mark.parametrize("entry", [e for e in CORPUS if "cpu" in e.runs_on], ids=lambda e: e.name)
def test_adversarial_rejected_on_cpu(
    entry, evaluator: SubprocessEvaluator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    request = EvalRequest(
        task_key=entry.task,
        task_source=_task_source(entry.task),
        candidate_source=entry.source,
        device="cpu",
        shape="smoke",
        trials=3,
        timing_runs=5,
        warmup_runs=1,
        timeout_s=240,
    )
    result = evaluator.evaluate(request)
    assert not result.correct, f"{entry.name} passed: {result.checks}"
    assert result.error_kind == entry.expected_kind, (result.error_kind, result.error_excerpt)
    failed = {name for name, status in result.checks.items() if status.startswith("fail")}
    assert failed & set(entry.expected_checks), (failed, result.error_excerpt)
    if result.error_kind.value == "mismatch":  # it ran, so it compiled; the error size is reported
        assert result.compiled
        if "dtype" not in result.error_excerpt and "differ while" not in result.error_excerpt:
            assert result.max_abs_err is not None
