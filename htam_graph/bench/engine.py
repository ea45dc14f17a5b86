"""The bench engine: which runs to do, resuming from `results.jsonl`, `bench.json`, and the running score.

The folder contract is `notes/BENCH_FORMAT.md` (shared with `htam-graph report`). Only this process writes
`results.jsonl`: workers return rows, the engine appends each as one fsynced line when its run ends, so a
crash or Ctrl-C loses at most the runs in flight, and a re-run skips every (task, policy, seed) already there.
A folder holding a bench of another configuration is refused rather than mixed.
"""

from __future__ import annotations

import collections
import fnmatch
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from htam_graph.bench.budget import BUDGET_FILE
from htam_graph.bench.job import AWAITING, Job, run_dir_name
from htam_graph.errors import ConfigError, TaskError
from htam_graph.generators import LLMFlags
from htam_graph.importers.formats import scan_path
from htam_graph.importers.tasks_store import get_task, list_tasks, record_tasks
from htam_graph.model import Device, Language, PrecisionPolicy, ShapeVariant, Task
from htam_graph.ports import GraphStore
from htam_graph.settings import Settings

log = logging.getLogger(__name__)

__all__ = [
    "FORMAT_VERSION",
    "RESULT_FIELDS",
    "BenchSpec",
    "Executor",
    "ResultsLog",
    "Score",
    "resolve_selectors",
    "check_config",
    "plan_jobs",
    "drive",
]

FORMAT_VERSION = 1
RESULTS = "results.jsonl"
BENCH_JSON = "bench.json"
# bench.json fields that decide what a results row means: a folder is only resumed when all of them match.
RESULT_FIELDS = (
    "task_keys",
    "backend",
    "model",
    "policies",
    "steps",
    "device",
    "shape",
    "seeds",
    "frozen_memory",
    "precision_policy",
    "language",
)
_GLOB = set("*?[")


@dataclass(frozen=True)
class BenchSpec:
    """A bench's configuration (what `bench.json` records)."""

    selectors: list[str]
    task_keys: list[str]
    backend: str
    model: str
    policies: list[str]
    steps: int
    device: Device
    shape: ShapeVariant
    seeds: list[int]
    workers: int
    executor: str
    frozen_memory: bool
    precision_policy: PrecisionPolicy
    language: Language
    task_timeout_s: float | None
    candidate_timeout_s: float
    base_url: str | None = None
    budget_usd: float | None = None  # one dollar limit shared by every run (DIR/budget.jsonl)
    llm_flags: LLMFlags = LLMFlags()

    def config(self) -> dict[str, Any]:
        return {
            "selectors": self.selectors,
            "task_keys": self.task_keys,
            "backend": self.backend,
            "model": self.model,
            "policies": self.policies,
            "steps": self.steps,
            "device": self.device,
            "shape": self.shape,
            "seeds": self.seeds,
            "workers": self.workers,
            "executor": self.executor,
            "frozen_memory": self.frozen_memory,
            "precision_policy": self.precision_policy.value,
            "language": self.language.value,
            "task_timeout_s": self.task_timeout_s,
            "candidate_timeout_s": self.candidate_timeout_s,
            "budget_usd": self.budget_usd,
        }


# ------------------------------------------------------------------------------------------ task selection
def _select_one(store: GraphStore, selector: str, keys: list[str]) -> list[str]:
    """Task keys named by one selector (see `resolve_selectors`); imports paths into the graph first."""
    path = Path(selector)
    if path.exists():
        found = scan_path(path)
        if not found.tasks:
            why = f": {found.skipped[0].path}: {found.skipped[0].reason}" if found.skipped else ""
            raise TaskError(f"no KernelBench-form task under {selector}{why}")
        record_tasks(store, found.tasks)
        return [t.key for t in found.tasks]
    if _GLOB & set(selector):
        return [k for k in keys if fnmatch.fnmatchcase(k, selector)]
    if selector in keys:
        return [selector]
    prefix = selector.rstrip("/") + "/"
    return [k for k in keys if k.startswith(prefix)]  # a suite or a level: kernelbench/level2


def resolve_selectors(store: GraphStore, selectors: Sequence[str]) -> list[Task]:
    """The tasks named by SELECTORs, in order, without repeats. A selector is a task key, a glob over task
    keys (`kernelbench/level1/2*`), a key prefix such as a level (`kernelbench/level2`), or a KernelBench
    folder or `.py` file or a Robust-KBench checkout or task folder (imported into the graph first). Raises
    TaskError (one line) for a selector matching nothing."""
    keys = [t.key for t in list_tasks(store)]
    chosen: dict[str, None] = {}
    for selector in selectors:
        matched = _select_one(store, selector, keys)
        if not matched:
            raise TaskError(
                f"no task matches {selector!r} (a task key, a glob, a level such as kernelbench/level1, "
                "or a KernelBench path; import tasks with: htam-graph tasks import PATH)"
            )
        chosen.update(dict.fromkeys(matched))
    return [get_task(store, key) for key in chosen]


# ------------------------------------------------------------------------------------------ bench.json
def check_config(out_dir: Path, fresh: dict[str, Any]) -> dict[str, Any] | None:
    """The stored bench.json when `out_dir` holds a bench of the same configuration, None when it holds
    none; raises ConfigError (one line) when it holds another configuration or results without bench.json."""
    stored_path = out_dir / BENCH_JSON
    if not stored_path.exists():
        if (out_dir / RESULTS).exists():
            raise ConfigError(f"{out_dir} holds {RESULTS} but no {BENCH_JSON}: use another --out folder")
        return None
    try:
        stored: dict[str, Any] = json.loads(stored_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read {stored_path}: {e}") from e
    diffs = [
        f"{k}: {stored.get(k)!r} here, {fresh.get(k)!r} now"
        for k in RESULT_FIELDS
        if stored.get(k) != fresh.get(k)
    ]
    if diffs:
        shown = "; ".join(d if len(d) < 160 else d[:157] + "..." for d in diffs[:3])
        raise ConfigError(
            f"{out_dir} holds a bench with another configuration ({shown}); use another --out folder"
        )
    return stored


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


# ------------------------------------------------------------------------------------------ results.jsonl
class ResultsLog:
    """`results.jsonl`: read on start (a half-written last line from a crash is cut off), appended per run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[dict[str, Any]] = []
        if path.exists():
            self._load()

    def _load(self) -> None:
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            log.warning("%s: dropping a half-written last line (%d bytes)", self.path, len(data) - cut)
            with open(self.path, "r+b") as f:
                f.truncate(cut)
            data = data[:cut]
        for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
            try:
                row = json.loads(line)
                (row["task"], row["policy"], int(row["seed"]))
            except (ValueError, KeyError, TypeError) as e:
                raise ConfigError(f"{self.path} line {n} is not a results row ({e}); fix or move it") from e
            self.rows.append(row)

    @property
    def done(self) -> set[tuple[str, str, int]]:
        return {(r["task"], r["policy"], int(r["seed"])) for r in self.rows}

    def append(self, row: dict[str, Any]) -> None:
        line = json.dumps(row, default=str, sort_keys=True) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self.rows.append(row)


# ------------------------------------------------------------------------------------------ score
@dataclass(frozen=True)
class Score:
    """The running numbers shown while a bench runs (the report's definitions, see
    htam_graph/report/metrics.py)."""

    runs: int
    correct: float  # share of runs in which some candidate passed every check
    fast_1: float  # share of runs returning a correct kernel faster than eager
    geomean_eager_x: float  # over all runs; the reference and failed runs count 1.0
    statuses: dict[str, int]

    @classmethod
    def of(cls, rows: Iterable[dict[str, Any]]) -> Score:
        rows = list(rows)
        if not rows:
            return cls(0, 0.0, 0.0, 1.0, {})
        speedups = [_speedup(r) for r in rows]
        correct = sum(1 for r in rows if (r.get("correct_steps") or 0) > 0)
        fast = sum(1 for r, x in zip(rows, speedups, strict=True) if _returned_kernel(r) and x > 1.0)
        geo = math.exp(sum(math.log(x) for x in speedups) / len(speedups))
        statuses = dict(collections.Counter(str(r.get("status")) for r in rows))
        return cls(len(rows), correct / len(rows), fast / len(rows), geo, statuses)


def _returned_kernel(row: dict[str, Any]) -> bool:
    return row.get("status") == "done" and row.get("best_is_reference") is False


def _speedup(row: dict[str, Any]) -> float:
    x = row.get("best_speedup_eager_x")
    if _returned_kernel(row) and isinstance(x, int | float) and x > 0:
        return float(x)
    return 1.0


# ------------------------------------------------------------------------------------------ jobs
def plan_jobs(
    spec: BenchSpec, tasks: Sequence[Task], settings: Settings, out_dir: Path, done: set[tuple[str, str, int]]
) -> list[Job]:
    """The jobs still to run, task by task (each task's policies and seeds side by side, so every policy
    sees a memory grown by the same earlier tasks)."""
    jobs = []
    for task in tasks:
        for seed in spec.seeds:
            for policy in spec.policies:
                if (task.key, policy, seed) in done:
                    continue
                run_dir = out_dir / "runs" / run_dir_name(task.key, policy, seed)
                jobs.append(
                    Job(
                        task=task,
                        policy=policy,
                        seed=seed,
                        settings=settings,
                        backend=spec.backend,
                        model=spec.model,
                        base_url=spec.base_url,
                        steps=spec.steps,
                        device=spec.device,
                        shape=spec.shape,
                        language=spec.language,
                        precision_policy=spec.precision_policy,
                        candidate_timeout_s=spec.candidate_timeout_s,
                        frozen_memory=spec.frozen_memory,
                        run_dir=run_dir,
                        row_path=run_dir / ".row.json",
                        budget_usd=spec.budget_usd,
                        budget_path=out_dir / BUDGET_FILE if spec.budget_usd is not None else None,
                        llm_flags=spec.llm_flags,
                    )
                )
    return jobs


class Executor(Protocol):
    """What `drive` needs from an executor (`executors.LocalExecutor`, `executors.RayExecutor`)."""

    @property
    def in_flight(self) -> int: ...

    def submit(self, job: Job) -> None: ...

    def wait(self, timeout_s: float) -> list[dict[str, Any]]: ...

    def shutdown(self) -> None: ...


def drive(
    executor: Executor,
    jobs: Sequence[Job],
    results: ResultsLog,
    max_in_flight: int,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    on_tick: Callable[[], None] | None = None,
    may_start: Callable[[], bool] | None = None,
    on_held: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Run `jobs` on `executor`, at most `max_in_flight` at once, appending each row as its run ends.

    `may_start` is asked before each new run (the shared budget): once it says no, no run starts and the
    ones in flight finish. Returns how many jobs did not run: never started, or stopped by the budget before
    their first step (status `budget`; not recorded, so a resume runs them). A run that stopped awaiting a
    reply (status `awaiting_reply`) is not recorded either: its row goes to `on_held`, and a resume continues
    it. On any exit other than completion (Ctrl-C, an error) the runs in flight are killed, not recorded."""
    pending = collections.deque(jobs)
    not_run = 0
    try:
        while pending or executor.in_flight:
            while pending and executor.in_flight < max_in_flight:
                if may_start is not None and not may_start():
                    not_run += len(pending)
                    pending.clear()
                    break
                executor.submit(pending.popleft())
            for row in executor.wait(0.5):
                if row.get("status") == "budget":
                    not_run += 1
                    continue
                if row.get("status") == AWAITING:
                    if on_held:
                        on_held(row)
                    continue
                results.append(row)
                if on_row:
                    on_row(row)
            if on_tick:
                on_tick()
    finally:
        executor.shutdown()
    return not_run
