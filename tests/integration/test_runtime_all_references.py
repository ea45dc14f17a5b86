"""MUST SHOW on the CPU: every task of the KernelBench dev split, its reference copied as ModelNew, passes `eval` at
smoke shapes (trials and one extra shape variant, timing with few runs: the point is the checks, not the times).

The references are trusted code, so they run in one reused worker per level (`evaluate_many(reuse_worker=True)`);
untrusted candidates always get a fresh process each. Levels 1 and 2 take a few minutes on 2 cores; level 3
(ResNet/DenseNet-sized models at smoke shapes) takes ~10 more and is marked slow.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.kernels_runtime.parent.reference import reference_as_candidate
from htam_graph.model import EvalRequest

KB = Path(
    os.environ.get("HTAM_KERNELBENCH", str(Path(__file__).resolve().parents[1] / "data" / "kernelbench"))
)


def _sweep(level: str, tmp_path: Path) -> None:
    files = sorted((KB / level).glob("*.py"))
    if not files:
        pytest.skip(f"no KernelBench {level} here")
    requests = []
    for f in files:
        src = f.read_text(encoding="utf-8")
        requests.append(
            EvalRequest(
                task_key=f"{level}/{f.stem}",
                task_source=src,
                candidate_source=reference_as_candidate(src),
                device="cpu",
                shape="smoke",
                trials=2,
                extra_shapes=1,
                timing_runs=2,
                warmup_runs=0,
                measure_baselines=False,
                candidate_kind="reference",
                timeout_s=600,
            )  # fmt: skip
        )
    results = SubprocessEvaluator(cache_dir=tmp_path).evaluate_many(requests, reuse_worker=True)
    failures = {
        r.task_key: (res.error_kind, res.error_excerpt[:300])
        for r, res in zip(requests, results, strict=True)
        if not res.correct
    }
    assert failures == {}, failures
    for res in results:  # every defence ran (kernel_launched is skipped on the reference track, by design)
        assert res.checks["correctness"].startswith("pass") and res.checks["deterministic_rerun"].startswith(
            ("pass", "skipped")
        )


def test_level1_references_pass_at_smoke_shapes(tmp_path: Path) -> None:
    _sweep("level1", tmp_path)


def test_level2_references_pass_at_smoke_shapes(tmp_path: Path) -> None:
    _sweep("level2", tmp_path)


@pytest.mark.slow
def test_level3_references_pass_at_smoke_shapes(tmp_path: Path) -> None:
    _sweep("level3", tmp_path)
