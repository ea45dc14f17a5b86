"""Pre-building CUDA candidates in parallel CPU processes before they are timed one by one on the GPU.

`compile_many` imports each CUDA candidate in its own worker process (mode "compile": the module body runs, so
`load_inline` builds the extension into `<cache>/torch_extensions/<sha256(source)[:16]>`; nothing runs on a
device). The later evaluation of the same source finds the build there (torch re-uses it when the sources are
unchanged), so its `compile_s` is the warm load time. Compilation is parallel; timing stays serial per GPU.
Sources rejected by the static checks are never executed, not even to compile.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.kernels_runtime.paths import source_digest
from htam_graph.kernels_runtime.static_checks import analyse
from htam_graph.model import EvalRequest, EvalResult, PrecisionPolicy

__all__ = ["CompileOutcome", "compile_many"]


@dataclass(frozen=True)
class CompileOutcome:
    """One pre-build: `built` False with `skipped` set when there was nothing to build or it was not allowed."""

    digest: str
    built: bool
    compile_s: float = 0.0
    excerpt: str = ""
    skipped: str = ""


def _one(
    evaluator: SubprocessEvaluator, source: str, policy: PrecisionPolicy, timeout_s: float
) -> CompileOutcome:
    digest = source_digest(source)
    report = analyse(source, policy, True)
    if report.syntax_error or report.violations:
        return CompileOutcome(digest, False, skipped="rejected by the static checks: not executed")
    if not report.needs_cuda_build:
        return CompileOutcome(digest, False, skipped="not a CUDA C++ candidate: nothing to pre-build")
    request = EvalRequest(
        task_key="compile-only", task_source="", candidate_source=source, timeout_s=timeout_s
    )
    raw = evaluator.compile_outcomes([request])[0]
    if isinstance(raw, EvalResult):  # the worker was lost (timeout, crash, infra)
        kind = raw.error_kind.value if raw.error_kind else "error"
        return CompileOutcome(digest, False, excerpt=f"{kind}: {raw.error_excerpt}")
    return CompileOutcome(digest, bool(raw["ok"]), float(raw["compile_s"]), str(raw.get("excerpt", "")))


def compile_many(
    sources: Sequence[str],
    evaluator: SubprocessEvaluator | None = None,
    jobs: int | None = None,
    policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT,
    timeout_s: float = 600.0,
) -> list[CompileOutcome]:
    """Pre-build the CUDA candidates among `sources` with up to `jobs` worker processes (default: CPU count)."""
    evaluator = evaluator or SubprocessEvaluator()
    jobs = max(1, jobs or os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # threads only wait on the worker processes
        return list(pool.map(lambda s: _one(evaluator, s, policy, timeout_s), sources))
