"""`SubprocessEvaluator`: the `Evaluator` port, one fresh child process per candidate (evaluation.md pitfall 19).

The caller never runs candidate code. Each evaluation spawns `python -m htam_graph.kernels_runtime.worker` in its
own session/process group with the request on stdin (a CPU evaluation forks the same worker from a template that
has imported torch already, templates.py); the verdict comes back through a result file (stdout is the
candidate's). A hard per-request timeout kills the whole group (`os.killpg`), so hangs, segfaults, CUDA faults
and OOM kills cost one attempt and come back classified:

- `timeout`: the request ran past `timeout_s` (the group was killed);
- `crash`: the worker died (signal, or exit without a verdict) after it started running the candidate;
- `infra_error`: the worker could not be spawned, failed before it was ready (import failure), or returned a
  result that is unreadable, unsigned (wrong nonce) or invalid — never blamed on the candidate.

This module imports no torch: the parent stays light and cannot be touched by the candidate's CUDA state.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from htam_graph.devicefacts import GpuFacts
from htam_graph.kernels_runtime import diskcache
from htam_graph.kernels_runtime.parent import ncu
from htam_graph.kernels_runtime.parent.templates import (
    ForkedWorker,
    TemplateError,
    WorkerProcess,
    template_for,
)
from htam_graph.kernels_runtime.paths import extension_dir
from htam_graph.kernels_runtime.precheck import precheck
from htam_graph.kernels_runtime.recorder import tolerances
from htam_graph.kernels_runtime.static_checks import analyse
from htam_graph.model import ErrorKind, EvalRequest, EvalResult

log = logging.getLogger(__name__)

__all__ = ["SubprocessEvaluator", "WorkerRun", "default_cache_dir", "VARIANT_CACHE_ENV"]

_POLL_S = 0.05
_TAIL = 1500
# Longest wait for the GPU memory budget before the evaluation is given up as an infrastructure failure.
_MAX_QUEUE_S = 3600.0
_FACTS_TIMEOUT_S = 600.0
# A folder for the shape-variant selections that overrides `cache_dir/variants` (the test suite shares one
# across its evaluators). A selection is a pure function of the task source (harness._variants), so any
# evaluator may reuse another's.
VARIANT_CACHE_ENV = "HTAM_VARIANT_CACHE"


def default_cache_dir() -> Path:
    """A per-user cache for torch extensions and Triton (created on first use, not at import)."""
    return Path(tempfile.gettempdir()) / f"htam-graph-runtime-{os.getuid()}"


def failure_result(
    req: EvalRequest, kind: ErrorKind, excerpt: str, wall_s: float | None = None
) -> EvalResult:
    """A result for a request whose worker gave no verdict (timeout, crash, infra)."""
    rtol, atol = tolerances(req)
    try:
        language = analyse(req.candidate_source, req.precision_policy, False).language
    except Exception:  # the static pass never raises on bad code, but this path must not fail either
        language = None
    return EvalResult(
        compiled=False, correct=False, error_kind=kind, error_excerpt=excerpt[:2000], device=req.device,
        timing_on_cpu=req.device == "cpu", precision_policy=req.precision_policy, rtol=rtol, atol=atol,
        shape_variant=req.shape, language=language, wall_s=wall_s,
    )  # fmt: skip


def _tail(path: Path, limit: int = _TAIL) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-limit:].decode("utf-8", "replace").strip()


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


@dataclass
class WorkerRun:
    """Files of one worker process."""

    dir: Path
    nonce: str

    @property
    def result(self) -> Path:
        return self.dir / "result.jsonl"

    @property
    def progress(self) -> Path:
        return self.dir / "progress.txt"

    @property
    def stdout(self) -> Path:
        return self.dir / "stdout.txt"

    @property
    def stderr(self) -> Path:
        return self.dir / "stderr.txt"

    def progress_lines(self) -> list[str]:
        try:
            return self.progress.read_text(encoding="utf-8").splitlines()
        except OSError:
            return []

    def results(self) -> dict[int, Any]:
        """Complete, nonce-signed result lines by index; a malformed or unsigned line maps to None."""
        out: dict[int, Any] = {}
        try:
            text = self.result.read_text(encoding="utf-8")
        except OSError:
            return out
        for line in text.splitlines(keepends=True):
            if not line.endswith("\n"):
                continue  # still being written
            try:
                row = json.loads(line)
                index = int(row["index"])
            except (ValueError, KeyError, TypeError):
                out[-1] = None
                continue
            out[index] = row.get("result") if row.get("nonce") == self.nonce else None
        return out


def _out_of_device_memory(result: EvalResult) -> bool:
    """An infrastructure failure caused by running out of device memory (torch.OutOfMemoryError)."""
    return result.error_kind == ErrorKind.INFRA_ERROR and "out of memory" in result.error_excerpt.lower()


class SubprocessEvaluator:
    """Evaluates candidates in fresh child processes; see the module docstring for the classification."""

    def __init__(
        self,
        cache_dir: Path | None = None,
        python: str | None = None,
        keep_dirs: bool = False,
        oom_retries: int = 2,
        oom_wait_s: float = 5.0,
    ) -> None:
        self.cache_dir = cache_dir or default_cache_dir()
        self.python = python or sys.executable
        self.keep_dirs = keep_dirs
        self.oom_retries = oom_retries
        self.oom_wait_s = oom_wait_s

    # ------------------------------------------------------------------ public API
    def evaluate(self, request: EvalRequest) -> EvalResult:
        """One candidate in one fresh worker. Never raises for anything the candidate does."""
        start = time.perf_counter()
        rejected = precheck(request)
        if rejected is not None:
            return rejected.model_copy(update={"wall_s": time.perf_counter() - start})
        result = self._run([request], "eval")[0]
        for attempt in range(self.oom_retries):
            if not _out_of_device_memory(result):
                break
            # Several evaluations share a GPU (bench workers): out of memory says more about the neighbours than
            # about this candidate, so the evaluation is repeated in a fresh worker after a jittered wait.
            wait = self.oom_wait_s * (attempt + 1) * (0.5 + secrets.randbelow(1000) / 1000)
            log.info("%s: out of device memory, retrying in %.0f s", request.task_key, wait)
            time.sleep(wait)
            result = self._run([request], "eval")[0]
            result = result.model_copy(
                update={"checks": {**result.checks, "oom_retry": f"info: evaluation repeated {attempt + 1}x"}}
            )
        return result.model_copy(update={"wall_s": time.perf_counter() - start})

    def evaluate_many(self, requests: Sequence[EvalRequest], reuse_worker: bool = False) -> list[EvalResult]:
        """Evaluate several requests. Default: one fresh worker each (untrusted candidates).

        `reuse_worker=True` runs them in one worker, one after the other, and is allowed only when every request
        is on the trusted reference track (`candidate_kind="reference"`): it saves the ~3 s torch import per task
        when sweeping references (e.g. all tasks at smoke shapes), where no candidate could poison the process.
        A timeout or crash still kills only that worker; the remaining requests continue in a new one.
        """
        if not reuse_worker:
            return [self.evaluate(r) for r in requests]
        if any(r.candidate_kind != "reference" for r in requests):
            raise ValueError("reuse_worker is only for candidate_kind='reference' requests (trusted code)")
        if len({r.device for r in requests}) > 1:
            raise ValueError("reuse_worker needs all requests on one device")
        return self._run(list(requests), "eval")

    def device_facts(self, request: EvalRequest) -> GpuFacts | None:
        """What the prompts should know about the device and the task's reference there (`GpuFacts`), measured
        in a worker (mode "facts"); on a GPU also the profile of `request`'s candidate when it is a kernel and an
        `ncu` summary of its most expensive kernel where Nsight Compute runs. None when the worker could not
        measure them (logged): a run goes on without them. CPU facts (versions, input shapes) are cached here
        per task, shape and installed torch/Triton; the reference's GPU facts are cached by the worker."""
        if request.device == "cpu":
            key = f"cpu-facts|{_installed('torch')}|{_installed('triton')}|{request.shape}|{request.task_source}"
            cached = diskcache.cached_json(
                str(self.cache_dir / "facts"), key, lambda: _dump(self._measure_facts(request)), _valid_facts
            )
            return GpuFacts.model_validate(cached) if cached is not None else None
        facts = self._measure_facts(request)
        if facts is None or not facts.best_kernels:
            return facts
        env = self._env("cuda")  # the candidate's CUDA extensions are reused from its evaluation's build
        env["TORCH_EXTENSIONS_DIR"] = extension_dir(
            str(self.cache_dir / "torch_extensions"), request.candidate_source
        )
        summary, note = ncu.summarise_kernel(
            request, facts.best_kernels[0].name, facts.gpu_name, self.python, env, self.cache_dir / "ncu"
        )
        return facts.model_copy(update={"ncu": summary, "ncu_note": note})

    def _measure_facts(self, request: EvalRequest) -> GpuFacts | None:
        raw = self._run_raw([request.model_copy(update={"timeout_s": _FACTS_TIMEOUT_S})], "facts")[0]
        if isinstance(raw, EvalResult):
            log.warning("%s: no device facts (%s)", request.task_key, raw.error_excerpt.splitlines()[0][:200])
            return None
        if not isinstance(raw, dict) or raw.get("facts") is None:
            excerpt = str(raw.get("excerpt", "")) if isinstance(raw, dict) else repr(raw)
            log.warning("%s: no device facts (%s)", request.task_key, excerpt[-300:])
            return None
        try:
            return GpuFacts.model_validate(raw["facts"])
        except ValidationError as e:
            log.warning("%s: invalid device facts from the worker: %s", request.task_key, e)
            return None

    def compile_outcomes(self, requests: Sequence[EvalRequest]) -> list[dict[str, Any]]:
        """Import each candidate in a worker without running it (builds its CUDA extensions); see compile_cache."""
        return self._run_raw(list(requests), "compile")

    # ------------------------------------------------------------------ worker management
    def _env(self, device: str) -> dict[str, str]:
        env = dict(os.environ)
        env["TRITON_CACHE_DIR"] = str(self.cache_dir / "triton")  # Triton's cache writes are atomic renames
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        if device == "cpu":
            env["TRITON_INTERPRET"] = "1"
            env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU evaluation must not reach a GPU
        else:
            env.pop("TRITON_INTERPRET", None)
        return env

    def _run(self, requests: list[EvalRequest], mode: str) -> list[EvalResult]:
        raw = self._run_raw(requests, mode)
        out: list[EvalResult] = []
        for req, item in zip(requests, raw, strict=True):
            if isinstance(item, EvalResult):
                out.append(item)
                continue
            try:
                out.append(EvalResult.model_validate(item))
            except ValidationError as e:
                out.append(failure_result(req, ErrorKind.INFRA_ERROR, f"corrupted worker result: {e}"))
        return out

    def _run_raw(self, requests: list[EvalRequest], mode: str) -> list[Any]:
        """Raw result payloads (or failure EvalResults) for `requests`, restarting workers after a loss."""
        results: list[Any] = []
        while len(results) < len(requests):
            results.extend(self._one_worker(requests[len(results) :], mode))
        return results

    def _spawn(self, run: WorkerRun, requests: list[EvalRequest], mode: str) -> WorkerProcess:
        base = self._env(requests[0].device)
        env = base | self._paths_env(run)
        payload = json.dumps(
            {"nonce": run.nonce, "mode": mode, "requests": [r.model_dump(mode="json") for r in requests]}
        )
        forked = self._fork(run, payload, base, env) if requests[0].device == "cpu" else None
        if forked is not None:
            return forked
        with open(run.stdout, "wb") as so, open(run.stderr, "wb") as se:
            proc = subprocess.Popen(
                [self.python, "-m", "htam_graph.kernels_runtime.worker"],
                stdin=subprocess.PIPE, stdout=so, stderr=se, cwd=run.dir, env=env, start_new_session=True,
            )  # fmt: skip
        assert proc.stdin is not None
        try:
            proc.stdin.write(payload.encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass  # the worker died at once; reported from its exit status below
        return proc

    def _paths_env(self, run: WorkerRun) -> dict[str, str]:
        """The worker's files and this evaluator's caches; the worker takes them out of its environment."""
        return {
            "HTAM_RESULT_PATH": str(run.result),
            "HTAM_PROGRESS_PATH": str(run.progress),
            "HTAM_EXT_ROOT": str(self.cache_dir / "torch_extensions"),
            VARIANT_CACHE_ENV: os.environ.get(VARIANT_CACHE_ENV) or str(self.cache_dir / "variants"),
            "HTAM_SOL_CACHE": str(self.cache_dir / "sol"),
            "HTAM_FACTS_CACHE": str(self.cache_dir / "facts"),
        }

    def _fork(
        self, run: WorkerRun, payload: str, base: dict[str, str], env: dict[str, str]
    ) -> ForkedWorker | None:
        """A CPU worker forked from a template that has imported torch already (templates.py), the template
        keyed by `base` (the environment without the worker's paths); None: spawn it."""
        if self.python != sys.executable:
            return None  # a custom interpreter (a wrapper script) is always spawned as given
        files = {"stdout": run.stdout, "stderr": run.stderr, "exit": run.dir / "exit_code"}
        for _ in range(2):  # a template that died is closed by the failed fork and replaced by the second try
            try:
                template = template_for(self.python, base)
                return template.fork(payload, env, run.dir, files) if template is not None else None
            except (TemplateError, OSError) as e:
                failure = e
        log.warning("forking a worker failed (%s); spawning it fresh", failure)
        return None

    def _one_worker(self, requests: list[EvalRequest], mode: str) -> list[Any]:
        """Run one worker until it finishes or is lost; return results for a prefix of `requests` (≥ 1)."""
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        run = WorkerRun(Path(tempfile.mkdtemp(prefix="htam-worker-")), secrets.token_hex(16))
        started = time.perf_counter()
        try:
            proc = self._spawn(run, requests, mode)
        except OSError as e:
            shutil.rmtree(run.dir, ignore_errors=True)
            return [failure_result(requests[0], ErrorKind.INFRA_ERROR, f"cannot spawn the worker: {e}")]
        try:
            return self._watch(proc, run, requests, started)
        finally:
            _kill_group(proc)
            if not self.keep_dirs:
                shutil.rmtree(run.dir, ignore_errors=True)

    def _watch(
        self, proc: WorkerProcess, run: WorkerRun, requests: list[EvalRequest], started: float
    ) -> list[Any]:
        # `used`: the current request's time outside waits for the GPU; the clock pauses (not restarts) in a wait.
        current, used, last = 0, 0.0, started
        while True:
            results = run.results()
            if -1 in results or any(v is None for v in results.values()):
                return self._collect(results, requests, run, "corrupted or unsigned worker result")
            if len(results) == len(requests):
                return [results[i] for i in range(len(requests))]
            if current in results:
                current, used, last = current + 1, 0.0, time.perf_counter()
                continue
            rc = proc.poll()
            if rc is not None:
                results = run.results()
                if len(results) == len(requests):
                    return [results[i] for i in range(len(requests))]
                return self._collect(results, requests, run, self._lost(rc, run, current))
            now = time.perf_counter()
            if self._queued(run, current):
                # waiting for the GPU (memory budget or lock), in the harness: not the candidate's time
                last = now
                if now - started > _MAX_QUEUE_S:
                    _kill_group(proc)
                    msg = f"waited over {_MAX_QUEUE_S:g} s for GPU memory or the GPU lock; the worker was stopped"
                    return [results[i] for i in range(current)] + [
                        failure_result(requests[current], ErrorKind.INFRA_ERROR, msg)
                    ]
            else:
                used, last = used + (now - last), now
            if used > requests[current].timeout_s:
                _kill_group(proc)
                self._clear_locks(requests[current])
                kept = [results[i] for i in range(current)]
                msg = f"timed out after {requests[current].timeout_s:g} s; the worker's process group was killed"
                return kept + [failure_result(requests[current], ErrorKind.TIMEOUT, msg + _with_tail(run))]
            time.sleep(_POLL_S)

    @staticmethod
    def _queued(run: WorkerRun, current: int) -> bool:
        """Request `current` is waiting for the GPU (memory budget or lock): more "queued" than "admitted" lines."""
        lines = run.progress_lines()
        return lines.count(f"queued {current}") > lines.count(f"admitted {current}")

    def _lost(self, rc: int, run: WorkerRun, current: int) -> tuple[ErrorKind, str]:
        progress = run.progress_lines()
        if "ready" not in progress:
            return ErrorKind.INFRA_ERROR, f"the worker failed before it was ready (exit {rc})"
        if rc < 0:
            return ErrorKind.CRASH, f"the worker was killed by {_signal_name(rc)} while evaluating"
        return (
            ErrorKind.CRASH,
            f"the worker exited with code {rc} without a verdict (candidate code ended the process?)",
        )

    def _collect(
        self, results: dict[int, Any], requests: list[EvalRequest], run: WorkerRun, why: Any
    ) -> list[Any]:
        """Results up to the first missing/bad one, which gets a failure result."""
        kept: list[Any] = []
        for i, req in enumerate(requests):
            item = results.get(i)
            if item is not None:
                kept.append(item)
                continue
            if isinstance(why, tuple):
                kind, msg = why
            else:
                kind, msg = ErrorKind.INFRA_ERROR, str(why)
            if kind is not ErrorKind.INFRA_ERROR:
                self._clear_locks(req)
            kept.append(failure_result(req, kind, msg + _with_tail(run)))
            break
        return kept

    def _clear_locks(self, req: EvalRequest) -> None:
        """Remove build locks a killed worker left behind (torch would otherwise wait on them forever)."""
        ext = Path(extension_dir(str(self.cache_dir / "torch_extensions"), req.candidate_source))
        for lock in ext.glob("*/lock"):
            lock.unlink(missing_ok=True)


def _installed(package: str) -> str:
    """The installed version of `package` (read from its metadata, never imported), "" when absent."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _dump(facts: GpuFacts | None) -> dict[str, Any] | None:
    return facts.model_dump(mode="json") if facts is not None else None


def _valid_facts(cached: Any) -> dict[str, Any] | None:
    """A stored facts object that still validates (None: measure again; a stored failure is never reused)."""
    try:
        return GpuFacts.model_validate(cached).model_dump(mode="json") if isinstance(cached, dict) else None
    except ValidationError:
        return None


def _with_tail(run: WorkerRun) -> str:
    tail = _tail(run.stderr) or _tail(run.stdout)
    return f"\n--- worker output (tail) ---\n{tail}" if tail else ""


def _kill_group(proc: WorkerProcess) -> None:
    """SIGKILL the worker's whole process group (its compile subprocesses too), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log.warning("worker %d did not exit after SIGKILL", proc.pid)
