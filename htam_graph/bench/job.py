"""One bench job: a (task, policy, seed) run of the HTAM loop, executed in its own worker process.

The worker (`child_main`, started by `executors.py` as `python -c ...` in a new session) reads a pickled `Job`
from stdin, runs the loop with the same helpers as `htam-graph run` (backend, `RunFiles`, `summary_of`), and
writes one results row (BENCH_FORMAT.md) atomically to `job.row_path`. Everything it learns goes into the
shared graph as it happens (each step's attempt is recorded by the loop), so later jobs benefit even if this
one is killed. A job that ends without a row (killed by the task timeout, crashed) gets a row from
`failure_row`.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from htam_graph.errors import BudgetExceeded
from htam_graph.generators import LLMFlags
from htam_graph.loop import PolicyName, RunConfig, RunResult
from htam_graph.model import Device, Language, PrecisionPolicy, ShapeVariant, Task
from htam_graph.settings import Settings

log = logging.getLogger(__name__)

__all__ = [
    "AWAITING",
    "Job",
    "run_job",
    "result_row",
    "failure_row",
    "child_main",
    "run_dir_name",
    "TRAJECTORY_KEYS",
]

AWAITING = "awaiting_reply"  # the status of a run that stopped awaiting a reply (never in results.jsonl)

# The per-step fields kept in results.jsonl (the full eval of every step stays in runs/.../trajectory.json).
TRAJECTORY_KEYS = (
    "step",
    "global",
    "local",
    "probability",
    "status",
    "error_kind",
    "speedup_x",
    "best_speedup_x",
    "gain",
)


@dataclass(frozen=True)
class Job:
    """Everything a worker needs for one (task, policy, seed) run; pickled to the worker."""

    task: Task
    policy: str
    seed: int
    settings: Settings
    backend: str
    model: str
    base_url: str | None
    steps: int
    device: Device
    shape: ShapeVariant
    language: Language
    precision_policy: PrecisionPolicy
    candidate_timeout_s: float
    frozen_memory: bool
    run_dir: Path  # runs/<task>/<policy>/seed_<n>/ (or a node-local folder under Ray)
    row_path: Path  # where the worker writes its results row (JSON)
    budget_usd: float | None = None  # the bench's shared dollar limit (--budget-usd), None: none
    budget_path: Path | None = None  # DIR/budget.jsonl, the ledger every run of the bench writes to
    llm_flags: LLMFlags = LLMFlags()  # --llm-timeout, --max-tokens, --temperature, --price, --record, ...

    @property
    def triple(self) -> tuple[str, str, int]:
        return (self.task.key, self.policy, self.seed)

    def run_config(self) -> RunConfig:
        return RunConfig(
            steps=self.steps,
            policy=PolicyName(self.policy),
            device=self.device,
            shape=self.shape,
            language=self.language,
            precision_policy=self.precision_policy,
            seed=self.seed,
            timeout_s=self.candidate_timeout_s,
            record=not self.frozen_memory,
        )


def run_dir_name(task_key: str, policy: str, seed: int) -> Path:
    """`<task_key with / replaced by __>/<policy>/seed_<n>` (relative to DIR/runs)."""
    return Path(task_key.replace("/", "__")) / policy / f"seed_{seed}"


def run_job(job: Job) -> dict[str, Any]:
    """Run the loop for one job in this process; return its results row (status done or error)."""
    from htam_graph.bench.budget import FileLedger
    from htam_graph.bench.resume import load_resume
    from htam_graph.bench.runfiles import RunFiles, summary_of
    from htam_graph.generators import make_backend, run_generator
    from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
    from htam_graph.loop import OptimizationLoop
    from htam_graph.store import store_session

    start = time.perf_counter()
    # No autotune directory: bench runs stay independent (a shared cache would let one policy's runs start
    # from another's measurements).
    ledger = None
    if job.budget_usd is not None and job.budget_path is not None:
        ledger = FileLedger(job.budget_path, "/".join(map(str, job.triple)))
    generator, model, executable = make_backend(
        job.backend,
        job.budget_usd,
        job.base_url,
        precision_policy=job.precision_policy,
        ledger=ledger,
        flags=job.llm_flags,
        notify=lambda message: log.warning("%s", message),  # into the run's worker.log
    )
    cfg = job.run_config()
    # the steps of this run before a cut (or before it stopped awaiting a reply), if any
    resumed = load_resume(job.run_dir, job.steps)
    resume, prior_rows = resumed if resumed else (None, None)
    files = RunFiles(job.run_dir, job.task.key, multi=False, prior_steps=prior_rows)
    generator = run_generator(generator, job.run_dir, job.llm_flags)
    evaluator = SubprocessEvaluator(cache_dir=job.settings.htam_home / "cache")
    with store_session(job.settings) as store:
        loop = OptimizationLoop(
            store,
            evaluator,
            generator,
            job.settings.policy,
            cfg,
            executable_locals=executable,
            on_step=files.step,
            model_name=model,
        )
        result = loop.run(job.task, resume=resume)
    summary = summary_of(result, cfg, job.backend, model)
    if result.pending is not None:
        reply = files.await_reply(result, result.pending, cfg_record(job))
        summary["awaiting_reply"] = str(reply)
    files.finish(result, summary)
    row = result_row(job, result, summary, files.steps, time.perf_counter() - start)
    # wall_s is this invocation's time only; the steps before a cut were made (and timed) by an earlier one
    row["resumed_after_steps"] = len(resume.steps) if resume else 0
    if result.pending is not None:
        # Not a result yet: the driver keeps it out of results.jsonl, and the same bench command resumes it.
        row.update(status=AWAITING, awaiting_reply=summary["awaiting_reply"])
    elif isinstance(result.backend_error, BudgetExceeded):
        # Stopped cleanly by the shared budget: its steps are real results (a run cut short, status done);
        # a run stopped before its first step did nothing (status budget: the driver drops it, a resume redoes
        # it).
        status = "done" if result.steps else "budget"
        row.update(status=status, stopped_reason="budget", error=_one_line(str(result.backend_error)))
    elif result.backend_error is not None:
        row.update(status="error", error=_one_line(str(result.backend_error)))
    return row


def cfg_record(job: Job) -> dict[str, Any]:
    """The configuration a pending request of this job records (see `runfiles.run_config_record`)."""
    from htam_graph.bench.runfiles import run_config_record

    return run_config_record(job.run_config(), job.backend)


def _reference_times(steps: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """(ref_eager_us, ref_compile_us) measured in any step (the reference is timed with every candidate)."""
    for s in steps:
        ev = s.get("eval") or {}
        if ev.get("ref_eager_us"):
            return ev.get("ref_eager_us"), ev.get("ref_compile_us")
    return None, None


def _compact(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for s in steps:
        row = {k: s.get(k) for k in TRAJECTORY_KEYS}
        ev = s.get("eval") or {}
        row.update(runtime_us=ev.get("runtime_us"), compiled=ev.get("compiled"), correct=ev.get("correct"))
        out.append(row)
    return out


def _base_row(job: Job) -> dict[str, Any]:
    return {
        "task": job.task.key,
        "level": job.task.level,
        "op_tags": list(job.task.op_tags),
        "policy": job.policy,
        "seed": job.seed,
        "backend": job.backend,
        "model": job.model,
        "steps": job.steps,
        "device": job.device,
        "shape": job.shape,
        "precision_policy": job.precision_policy.value,
    }


def result_row(
    job: Job, result: RunResult, summary: dict[str, Any], steps: list[dict[str, Any]], wall_s: float
) -> dict[str, Any]:
    """The results.jsonl row of a finished run (BENCH_FORMAT.md): `summary_of`'s numbers, with what is
    missing there (reference timings, GPU, tolerance) taken from the steps' evaluations."""
    best = result.best_result
    evals = [s["eval"] for s in steps if s.get("eval")]
    # Where the run was measured: the best candidate's evaluation, else the first that reached the worker.
    ran = [e for e in evals if e.get("torch_version")] or evals or [{}]
    first: dict[str, Any] = best.model_dump(mode="json") if best else ran[0]
    step_eager, step_compile = _reference_times(steps)
    ref_eager = summary.get("ref_eager_us") or step_eager
    ref_compile = summary.get("ref_compile_us") or step_compile
    compile_x = summary.get("best_speedup_compile_x")
    if result.best_is_reference:
        # The reference returned: its speed-up over torch.compile is compile's time over eager's.
        compile_x = ref_compile / ref_eager if ref_compile and ref_eager else None
    return {
        **_base_row(job),
        "status": "done",
        "error": None,
        "run_key": result.run_key,
        "best_is_reference": result.best_is_reference,
        "best_step": result.best_step,
        "best_speedup_eager_x": summary["best_speedup_eager_x"],
        "best_speedup_compile_x": compile_x,
        "best_runtime_us": best.runtime_us if best else None,
        "ref_eager_us": ref_eager,
        "ref_compile_us": ref_compile,
        "sol_us": best.sol_us if best else None,
        "gpu_name": summary.get("gpu_name") or first.get("gpu_name", ""),
        "torch_version": summary.get("torch_version") or first.get("torch_version", ""),
        "timing_on_cpu": bool(first.get("timing_on_cpu", job.device == "cpu")),
        "rtol": first.get("rtol"),
        "atol": first.get("atol"),
        # the returned kernel was checked at atol scaled to a tiny output (kernels_runtime/worker/tinyout.py)
        "scaled_atol": best.scaled_atol if best else None,
        "correct_steps": summary["correct_steps"],
        "compile_failures": sum(1 for s in steps if s.get("error_kind") == "compile_error"),
        "usage": summary["usage"],
        "stopped_reason": result.stopped_reason,
        "confirmation": result.confirmation,
        "wall_s": round(wall_s, 3),
        "trajectory": _compact(steps),
    }


def failure_row(job: Job, status: str, error: str, wall_s: float) -> dict[str, Any]:
    """The row of a run that returned nothing (status error or timeout), with the steps it finished."""
    try:
        steps = json.loads((job.run_dir / "trajectory.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        steps = []
    ref_eager, ref_compile = _reference_times(steps)
    return {
        **_base_row(job),
        "status": status,
        "error": _one_line(error),
        "best_is_reference": None,
        "best_step": None,
        "best_speedup_eager_x": None,
        "best_speedup_compile_x": None,
        "best_runtime_us": None,
        "ref_eager_us": ref_eager,
        "ref_compile_us": ref_compile,
        "sol_us": None,
        "correct_steps": sum(1 for s in steps if s.get("status") != "failed"),
        "compile_failures": sum(1 for s in steps if s.get("error_kind") == "compile_error"),
        "wall_s": round(wall_s, 3),
        "trajectory": _compact(steps),
    }


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def write_row(path: Path, row: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(row, default=str), encoding="utf-8")
    tmp.replace(path)  # atomic: the supervisor never reads half a row


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM from the supervisor (task timeout, Ctrl-C): unwind so the evaluator's `finally` kills its
    # worker's process group (that group is its own session, so it would outlive a plain kill of this one).
    raise SystemExit(128 + signum)


def child_main() -> None:
    """Worker entry point: a pickled Job on stdin, its row written to `job.row_path`."""
    signal.signal(signal.SIGTERM, _terminate)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    job: Job = pickle.loads(sys.stdin.buffer.read())
    start = time.perf_counter()
    try:
        row = run_job(job)
    except Exception as e:  # any failure of this run is data for the results, not a crash of the bench
        log.exception("run %s failed", job.triple)
        row = failure_row(job, "error", f"{type(e).__name__}: {e}", time.perf_counter() - start)
    write_row(job.row_path, row)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the row is written; skip interpreter teardown (stray threads of client libraries)
