"""The runtime's self-check on a GPU (used by scripts/gpu_runtime_check.py and tests/gpu/test_runtime_gpu.py).

Sections, each returning JSON-able rows:
- `reference_sample`: the reference copied as ModelNew on level1/level2 tasks at default shapes; its speedup
  should be ≈ 1.0 and the spread of those ratios is the harness's noise floor;
- `good_candidates`: the hand-written Triton and CUDA kernels (CUDA pre-built in parallel, cold then warm);
- `adversarial`: every corpus file at default shapes; each must be rejected with its expected kind;
- `baselines`: eager (and torch.compile while the time budget lasts) per task, compared with
  `h200_baselines.jsonl` (that file used `triton.testing.do_bench`, calls back to back; we flush L2 and time with
  the head-start protocol of timing_protocol.py: on the H200 the ratios are 1.011 eager and 1.001 torch.compile over the
  100 dev tasks, results/h200/runtime/2026-11-30_head_start/).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from htam_graph.kernels_runtime.parent.baseline import baseline_request
from htam_graph.kernels_runtime.parent.compile_cache import compile_many
from htam_graph.kernels_runtime.parent.corpus import candidate_task, load_corpus
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.kernels_runtime.parent.reference import reference_as_candidate
from htam_graph.model import EvalRequest, EvalResult, ShapeVariant

__all__ = [
    "Deadline",
    "reference_sample",
    "good_candidates",
    "adversarial",
    "baselines",
    "geomean",
    "summary_markdown",
]


class Deadline:
    """A wall-clock budget shared by the sections."""

    def __init__(self, budget_s: float) -> None:
        self.end = time.monotonic() + budget_s

    def left(self) -> float:
        return self.end - time.monotonic()


def geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def _row(name: str, result: EvalResult) -> dict[str, Any]:
    return {
        "name": name,
        "correct": result.correct,
        "error_kind": result.error_kind.value if result.error_kind else None,
        "failed_checks": [k for k, v in result.checks.items() if v.startswith("fail")],
        "runtime_us": result.runtime_us,
        "spread_us": result.runtime_spread_us,
        "ref_eager_us": result.ref_eager_us,
        "ref_compile_us": result.ref_compile_us,
        "speedup_eager_x": result.speedup_eager_x,
        "sol_us": result.sol_us,
        "sol_flagged": result.sol_flagged,
        "compile_s": result.compile_s,
        "wall_s": result.wall_s,
        "task_degenerate": result.task_degenerate,
        "timing_method": result.timing_method,
        "gpu": result.gpu_name,
        "excerpt": result.error_excerpt[:400],
    }


def reference_sample(
    ev: SubprocessEvaluator, kb: Path, tasks: Sequence[str], device: str = "cuda", shape: str = "default"
) -> list[dict[str, Any]]:
    """Reference-as-candidate at default shapes in one trusted worker; rows with the speedup ≈ 1.0."""
    reqs = []
    for t in tasks:
        src = (kb / t).read_text(encoding="utf-8")
        reqs.append(
            EvalRequest(
                task_key=t,
                task_source=src,
                candidate_source=reference_as_candidate(src),
                device=device,  # type: ignore[arg-type]
                shape=shape,  # type: ignore[arg-type]
                trials=2,
                extra_shapes=1,
                timing_runs=20,
                measure_baselines=False,
                candidate_kind="reference",
                timeout_s=180,
            )  # fmt: skip
        )
    return [_row(t, r) for t, r in zip(tasks, ev.evaluate_many(reqs, reuse_worker=True), strict=True)]


def good_candidates(
    ev: SubprocessEvaluator, kb: Path, folder: Path, device: str = "cuda", shape: str = "default"
) -> list[dict[str, Any]]:
    """Each hand-written candidate evaluated twice (cold, then warm caches); CUDA ones pre-built in parallel."""
    files = sorted(folder.glob("*.py"))
    sources = [f.read_text(encoding="utf-8") for f in files]
    start = time.perf_counter()
    built = compile_many(sources, evaluator=ev, jobs=4) if device == "cuda" else []
    prebuild_s = time.perf_counter() - start
    rows = []
    for f, src in zip(files, sources, strict=True):
        task = candidate_task(src) or ""
        req = EvalRequest(
            task_key=task, task_source=(kb / task).read_text(encoding="utf-8"), candidate_source=src,
            device=device, shape=shape, trials=5, extra_shapes=1, timing_runs=20, measure_baselines=False, timeout_s=300,  # type: ignore[arg-type]
        )  # fmt: skip
        for phase in (
            "first",
            "warm",
        ):  # the warm run re-uses the Triton cache / extension build; no torch.compile
            run = req if phase == "first" else req.model_copy(update={"measure_baselines": False})
            rows.append(_row(f"{f.stem} ({phase})", ev.evaluate(run)))
    for f, b in zip(files, built, strict=False):
        rows.append(
            {
                "name": f"{f.stem} (pre-build)",
                "built": b.built,
                "compile_s": b.compile_s,
                "skipped": b.skipped,
                "excerpt": b.excerpt[:300],
                "prebuild_wall_s": prebuild_s,
            }
        )
    return rows


def adversarial(
    ev: SubprocessEvaluator, kb: Path, folder: Path, device: str = "cuda"
) -> list[dict[str, Any]]:
    """Every corpus file for `device`; `ok` means rejected with the expected kind and one of the expected checks."""
    rows = []
    corpus_device = "gpu" if device == "cuda" else device  # the corpus headers say `runs_on: cpu,gpu`
    for entry in load_corpus(folder):
        if corpus_device not in entry.runs_on:
            continue
        req = EvalRequest(
            task_key=entry.task, task_source=(kb / entry.task).read_text(encoding="utf-8"), candidate_source=entry.source,
            device=device, trials=3, extra_shapes=1, timing_runs=5, measure_baselines=False, timeout_s=240,  # type: ignore[arg-type]
        )  # fmt: skip
        result = ev.evaluate(req)
        row = _row(entry.name, result)
        failed = set(row["failed_checks"])
        row["expected_kind"] = entry.expected_kind.value
        row["ok"] = (
            (not result.correct)
            and result.error_kind == entry.expected_kind
            and bool(failed & set(entry.expected_checks))
        )
        rows.append(row)
    return rows


def _chunks(items: Sequence[str], n: int) -> list[Sequence[str]]:
    return [items[i : i + n] for i in range(0, len(items), n)]


def baselines(
    ev: SubprocessEvaluator,
    kb: Path,
    tasks: Sequence[str],
    deadline: Deadline,
    compile_too: bool,
    timing_runs: int = 20,
    device: str = "cuda",
    shape: ShapeVariant = "default",
) -> list[dict[str, Any]]:
    """Eager and torch.compile per task while the deadline allows (eager only with `compile_too` False).

    A compile-pass evaluation times eager and torch.compile of the reference interleaved in one process, so one
    pass yields both numbers; rows are compared with h200_baselines.jsonl.
    """
    known = {}
    ref_file = kb / "h200_baselines.jsonl"
    if ref_file.exists():
        for line in ref_file.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            known[row["task"]] = row
    rows: dict[str, dict[str, Any]] = {}
    for compile_pass in [True] if compile_too else [False]:
        # torch.compile takes seconds per task: small chunks and a wider margin keep the deadline.
        size, margin = (2, 90.0) if compile_pass else (8, 30.0)
        for chunk in _chunks(list(tasks), size):
            if deadline.left() < margin:
                break
            reqs = [
                baseline_request(
                    t,
                    (kb / t).read_text(encoding="utf-8"),
                    device,
                    shape,
                    timing_runs,
                    compile_pass,
                    timeout_s=120,
                )
                for t in chunk
            ]
            for t, r in zip(chunk, ev.evaluate_many(reqs, reuse_worker=True), strict=True):
                row = rows.setdefault(t, {"task": t})
                if compile_pass:
                    row["compile_us"] = r.ref_compile_us
                    row["compile_note"] = r.checks.get("baseline_compile", "")[:200]
                row.update(eager_us=r.ref_eager_us, eager_iqr_us=r.runtime_spread_us, self_speedup_x=r.speedup_eager_x,
                           error_kind=r.error_kind.value if r.error_kind else None, task_degenerate=r.task_degenerate,
                           timing_method=r.timing_method, device_sync=r.checks.get("device_sync", "")[:200],
                           caller_stream=r.checks.get("caller_stream", "")[:200])  # fmt: skip
                ref = known.get(t)
                if ref:
                    row["h200_eager_us"] = ref["eager_ms"] * 1e3
                    row["h200_compiled_us"] = ref["compiled_ms"] * 1e3
                    if row.get("eager_us"):
                        row["eager_ratio"] = row["eager_us"] / row["h200_eager_us"]
                    if row.get("compile_us"):
                        row["compile_ratio"] = row["compile_us"] / row["h200_compiled_us"]
    return list(rows.values())


def summary_markdown(report: dict[str, Any]) -> str:
    """A short Markdown page of the report."""
    lines = [
        f"# Runtime GPU check — {report.get('gpu', '?')}",
        "",
        f"torch {report.get('torch')}, triton {report.get('triton')}",
        "",
    ]
    refs = report.get("reference_sample", [])
    if refs:
        ratios = [r["speedup_eager_x"] for r in refs if r.get("speedup_eager_x")]
        lines.append(f"## Reference as candidate ({len(refs)} tasks): noise floor")
        if ratios:
            lines.append(
                f"speedup median {statistics.median(ratios):.3f}×, min {min(ratios):.3f}×, max {max(ratios):.3f}×, geomean {geomean(ratios):.3f}×"
            )
        lines += [
            f"- {r['name']}: correct={r['correct']} speedup={r['speedup_eager_x']} {r['error_kind'] or ''}"
            for r in refs
        ]
        lines.append("")
    for section in ("good_candidates", "adversarial"):
        rows = report.get(section, [])
        if rows:
            lines.append(f"## {section}")
            for r in rows:
                extra = f" ok={r['ok']} expected={r['expected_kind']}" if "ok" in r else ""
                lines.append(
                    f"- {r['name']}: correct={r.get('correct')} kind={r.get('error_kind')} runtime_us={r.get('runtime_us')} speedup={r.get('speedup_eager_x')} compile_s={r.get('compile_s')}{extra}"
                )
            lines.append("")
    base = report.get("baselines", [])
    if base:
        eager = [r["eager_ratio"] for r in base if r.get("eager_ratio")]
        comp = [r["compile_ratio"] for r in base if r.get("compile_ratio")]
        lines.append(
            f"## Baselines vs h200_baselines.jsonl ({len(base)} tasks; eager {len(eager)}, compile {len(comp)})"
        )
        lines.append(
            f"eager ratio (ours / do_bench) geomean {geomean(eager)}, compile ratio geomean {geomean(comp)}"
        )
        lines.append(
            "Protocol: L2 flushed before every call, head start on the caller's stream, CUDA events around the call, "
            "device-wide synchronise after the end event (kernels_runtime/worker/timing_protocol.py); do_bench runs calls back to back."
        )
    return "\n".join(lines) + "\n"
