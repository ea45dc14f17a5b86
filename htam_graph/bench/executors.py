"""Where bench jobs run: a pool of local worker processes, or tasks on a Ray cluster.

Every job runs in its own worker process (`job.child_main`) started in a new session, under a supervisor
that enforces the per-task time limit. A worker that exceeds it gets SIGTERM (it unwinds, and the evaluator's
`finally` kills the evaluation worker's process group, which is a session of its own), then, after a grace
period, SIGKILL for every process of its tree seen in either snapshot and for their process groups. So a
timed-out run leaves no compile or candidate process behind.

- `LocalExecutor`: N slots on this machine; slot i evaluates on GPU `i % n_gpus` (`CUDA_VISIBLE_DEVICES`) when
  several GPUs are visible. Timing stays serial per GPU through `kernels_runtime.gpulock`
  (`HTAM_GPU_LOCK_DIR`).
- `RayExecutor`: one Ray task per job (`num_gpus=1` on CUDA), gathered with `ray.wait` as they finish. The Ray
  task runs the same supervisor on its node and returns the row plus the run's files, which the driver writes
  under DIR/runs/. The graph must be reachable from every node: the embedded FalkorDB (unix socket) only
  serves one machine; for several machines configure Neo4j (`NEO4J_URI`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from htam_graph.bench.job import Job, failure_row
from htam_graph.bench.resume import KEPT_FOR_RESUME
from htam_graph.errors import ConfigError
from htam_graph.kernels_runtime.gpulock import LOCK_DIR_ENV

__all__ = [
    "Supervised",
    "LocalExecutor",
    "RayExecutor",
    "kill_tree",
    "terminate",
    "descendants",
    "gpu_lock_env",
]

GRACE_S = 5.0  # between SIGTERM and SIGKILL
_POLL_S = 0.2
_CHILD = "from htam_graph.bench.job import child_main; child_main()"
_ROW_FILE = ".row.json"
_LOG_FILE = "worker.log"


# ----------------------------------------------------------------------------------------- process trees
def _proc_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (ppid, pgid, start time) of every process (Linux /proc; empty elsewhere)."""
    table: dict[int, tuple[int, int, str]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), int(fields[2]), fields[19])
    return table


def descendants(pid: int) -> dict[int, tuple[int, str]]:
    """Every descendant of `pid` now: pid -> (pgid, start time)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for p, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(p)
    found: dict[int, tuple[int, str]] = {}
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        if p in found:
            continue
        found[p] = (table[p][1], table[p][2])
        todo.extend(children.get(p, []))
    return found


def terminate(proc: subprocess.Popen[bytes]) -> dict[int, tuple[int, str]]:
    """Snapshot the worker's tree, then SIGTERM the worker (it unwinds and ends its evaluation worker)."""
    seen = descendants(proc.pid)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    return seen


def finish_kill(proc: subprocess.Popen[bytes], seen: dict[int, tuple[int, str]], deadline: float) -> None:
    """Wait for a terminated worker until `deadline` (monotonic), then SIGKILL everything of its tree seen
    before or now, with their process groups (never our own group)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    if proc.poll() is None:
        seen = {**seen, **descendants(proc.pid)}
    own = os.getpgrp()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the worker's own session (a no-op when it is gone)
    now = _proc_table()
    for pid, (pgid, started) in seen.items():
        if pid not in now or now[pid][2] != started:
            continue  # gone (or the pid was reused by another process): never signal a stranger
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if pgid not in (own, 0):
                os.killpg(pgid, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def kill_tree(proc: subprocess.Popen[bytes], grace_s: float = GRACE_S) -> None:
    """SIGTERM the worker, wait up to `grace_s`, then SIGKILL its whole tree (see the module docstring)."""
    finish_kill(proc, terminate(proc), time.monotonic() + grace_s)


def gpu_lock_env() -> dict[str, str]:
    """`HTAM_GPU_LOCK_DIR` for the workers: the caller's, else a per-user folder shared by every bench on
    this machine (so two benches on one GPU also time one at a time)."""
    folder = os.environ.get(LOCK_DIR_ENV) or str(
        Path(tempfile.gettempdir()) / f"htam-gpu-locks-{os.getuid()}"
    )
    return {LOCK_DIR_ENV: folder}


# ----------------------------------------------------------------------------------------- one job
class Supervised:
    """One job's worker process and its time limit."""

    def __init__(
        self, job: Job, task_timeout_s: float | None, env: dict[str, str], grace_s: float = GRACE_S
    ) -> None:
        self.job = job
        self.task_timeout_s = task_timeout_s
        self.env = env
        self.grace_s = grace_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0

    def start(self) -> None:
        """Start the worker on the job's run folder. Of an interrupted earlier attempt only its trajectory and
        candidates are kept, from which the worker resumes the run (resume.py); the rest is removed."""
        _clear_run_dir(self.job.run_dir)
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        with open(self.job.run_dir / _LOG_FILE, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # Ctrl-C reaches the bench only; the supervisor ends workers itself
            )
        assert self.proc.stdin is not None
        self.started = time.monotonic()
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.write(pickle.dumps(self.job))
            self.proc.stdin.close()

    def poll(self) -> dict[str, Any] | None:
        """The job's row once it is over (finished, failed or timed out), else None."""
        assert self.proc is not None
        rc = self.proc.poll()
        if rc is not None:
            return self._finished(rc)
        wall = time.monotonic() - self.started
        if self.task_timeout_s is not None and wall > self.task_timeout_s:
            kill_tree(self.proc, self.grace_s)
            msg = (
                f"the run exceeded --task-timeout {self.task_timeout_s:g} s; "
                "its worker process tree was killed"
            )
            row: dict[str, Any] = failure_row(self.job, "timeout", msg, time.monotonic() - self.started)
            return row
        return None

    def kill(self) -> None:
        """End the worker and its tree now (Ctrl-C, shutdown)."""
        if self.proc is not None and self.proc.poll() is None:
            kill_tree(self.proc, self.grace_s)

    def _finished(self, rc: int) -> dict[str, Any]:
        row_path = self.job.row_path
        try:
            row: dict[str, Any] = dict(json.loads(row_path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            tail = _tail(self.job.run_dir / _LOG_FILE)
            why = f"the worker exited with code {rc} without a result" + (f": {tail}" if tail else "")
            failed: dict[str, Any] = failure_row(self.job, "error", why, time.monotonic() - self.started)
            return failed
        row_path.unlink(missing_ok=True)
        return row


def _clear_run_dir(run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    for path in run_dir.iterdir():
        if path.name in KEPT_FOR_RESUME:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


# ----------------------------------------------------------------------------------------- local pool
class LocalExecutor:
    """Up to `workers` jobs at once on this machine, each in its own killable worker process."""

    def __init__(
        self,
        workers: int,
        task_timeout_s: float | None,
        gpu_ids: list[str] | None = None,
        env: dict[str, str] | None = None,
        grace_s: float = GRACE_S,
    ) -> None:
        self.slots: list[Supervised | None] = [None] * workers
        self.task_timeout_s = task_timeout_s
        self.gpu_ids = gpu_ids or []
        self.env = env or {}
        self.grace_s = grace_s

    @property
    def free(self) -> int:
        return sum(1 for s in self.slots if s is None)

    @property
    def in_flight(self) -> int:
        return len(self.slots) - self.free

    def slot_env(self, slot: int) -> dict[str, str]:
        """The environment of a worker in `slot`: with several GPUs, slot i sees only GPU i % n."""
        env = dict(self.env)
        if len(self.gpu_ids) > 1:
            env["CUDA_VISIBLE_DEVICES"] = self.gpu_ids[slot % len(self.gpu_ids)]
        return env

    def submit(self, job: Job) -> None:
        slot = self.slots.index(None)
        sup = Supervised(job, self.task_timeout_s, self.slot_env(slot), self.grace_s)
        sup.start()
        self.slots[slot] = sup

    def wait(self, timeout_s: float) -> list[dict[str, Any]]:
        """Rows of the jobs that ended within `timeout_s` (maybe none)."""
        deadline = time.monotonic() + timeout_s
        while True:
            rows = []
            for i, sup in enumerate(self.slots):
                row = sup.poll() if sup is not None else None
                if row is not None:
                    rows.append(row)
                    self.slots[i] = None
            if rows or time.monotonic() >= deadline:
                return rows
            time.sleep(_POLL_S)

    def shutdown(self) -> None:
        """Kill the jobs still in flight (their rows are not written: a resume runs them again)."""
        live = [s.proc for s in self.slots if s is not None and s.proc is not None and s.proc.poll() is None]
        seen = [terminate(p) for p in live]  # SIGTERM all first, so the grace periods overlap
        deadline = time.monotonic() + self.grace_s
        for proc, snapshot in zip(live, seen, strict=True):
            finish_kill(proc, snapshot, deadline)
        self.slots = [None] * len(self.slots)


# ----------------------------------------------------------------------------------------- Ray
def _collect_files(root: Path) -> dict[str, str]:
    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name != _ROW_FILE:
            files[path.relative_to(root).as_posix()] = path.read_text(encoding="utf-8", errors="replace")
    return files


def ray_job(job: Job, task_timeout_s: float | None, env: dict[str, str]) -> dict[str, Any]:
    """The body of one Ray task: supervise the job on this node in a node-local folder, return its row with
    the run's files under `_files` (the driver writes them into DIR/runs/)."""
    tmp = Path(tempfile.mkdtemp(prefix="htam-bench-"))
    run_dir = tmp / "run"
    local = dataclasses.replace(job, run_dir=run_dir, row_path=run_dir / _ROW_FILE)
    sup = Supervised(local, task_timeout_s, env)
    try:
        sup.start()
        while (row := sup.poll()) is None:
            time.sleep(_POLL_S)
        row["_files"] = _collect_files(run_dir)
        return row
    finally:
        sup.kill()  # on ray.cancel (KeyboardInterrupt here) the worker tree must not outlive the task
        shutil.rmtree(tmp, ignore_errors=True)


class RayExecutor:
    """Jobs as Ray tasks: `ray.init(address=$RAY_ADDRESS or None)`, reusing an already initialised Ray."""

    def __init__(self, task_timeout_s: float | None) -> None:
        try:
            import ray
        except ImportError as e:
            raise ConfigError("--executor ray needs Ray: pip install 'htam-graph[ray]'") from e
        self.ray: Any = ray
        self.owns = not ray.is_initialized()
        if self.owns:
            address = os.environ.get("RAY_ADDRESS") or None
            extra: dict[str, Any] = {} if address else {"include_dashboard": False}
            ray.init(address=address, log_to_driver=False, **extra)
        self.task_timeout_s = task_timeout_s
        self.env: dict[str, str] = {}
        self.remote: Any = None
        self.refs: dict[Any, Job] = {}

    def configure(self, device: str, env: dict[str, str]) -> None:
        """One CPU per task, plus one GPU on CUDA (Ray sets the task's CUDA_VISIBLE_DEVICES)."""
        self.env = env
        self.remote = self.ray.remote(ray_job).options(
            num_cpus=1, num_gpus=1 if device == "cuda" else 0, max_retries=0
        )

    def cluster_gpus(self) -> float:
        return float(self.ray.cluster_resources().get("GPU", 0))

    @property
    def in_flight(self) -> int:
        return len(self.refs)

    def submit(self, job: Job) -> None:
        assert self.remote is not None, "configure() first"
        ref = self.remote.remote(job, self.task_timeout_s, self.env)
        self.refs[ref] = job

    def wait(self, timeout_s: float) -> list[dict[str, Any]]:
        if not self.refs:
            return []
        ready, _ = self.ray.wait(list(self.refs), num_returns=1, timeout=timeout_s)
        if ready:
            ready, _ = self.ray.wait(list(self.refs), num_returns=len(self.refs), timeout=0)
        return [self._row(ref) for ref in ready]

    def _row(self, ref: Any) -> dict[str, Any]:
        job = self.refs.pop(ref)
        try:
            row: dict[str, Any] = self.ray.get(ref)
        except self.ray.exceptions.RayError as e:
            failed: dict[str, Any] = failure_row(
                job, "error", f"Ray task failed: {type(e).__name__}: {e}", 0.0
            )
            return failed
        files = row.pop("_files", {})
        shutil.rmtree(job.run_dir, ignore_errors=True)
        for rel, text in files.items():
            path = job.run_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return row

    def shutdown(self) -> None:
        """Cancel the tasks in flight (each kills its worker tree), then stop Ray if this bench started it."""
        refs = list(self.refs)
        for ref in refs:
            with contextlib.suppress(Exception):
                self.ray.cancel(ref)
        if refs:
            with contextlib.suppress(Exception):
                self.ray.wait(refs, num_returns=len(refs), timeout=GRACE_S + 10)
        self.refs.clear()
        if self.owns:
            self.ray.shutdown()
            self.owns = False
