"""Worker templates for CPU evaluations: fork a fresh worker from a process that has already imported torch.

A CPU evaluation spends most of its time importing torch in the fresh worker (~3.5 s of ~5 s on 2 cores). A
template (worker/template.py) does the imports once and forks one worker per evaluation; each worker is still a
new process in its own session that runs one request list and exits. Templates serve CPU evaluations only: a GPU
worker keeps a fresh interpreter of its own (its import is a small part of a GPU evaluation).

Templates are shared by every evaluator of this process and keyed by the Python executable and the worker
environment without the worker's paths (and pytest's name of the running test), so the imports a forked worker
inherits ran under the environment a spawned worker would have had; the worker itself gets the exact one. At most
`_KEEP` templates live at once (the least recently used one is stopped once its workers have ended);
`release_templates()` stops them all, and they stop themselves when this process ends (their stdin closes).
`HTAM_WORKER_TEMPLATE=0` turns them off: every worker is then spawned fresh.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Protocol

from htam_graph.procs import pid_exists

__all__ = [
    "ForkedWorker",
    "TemplateError",
    "WorkerProcess",
    "WorkerTemplate",
    "release_templates",
    "template_for",
    "template_pids",
]

# Not part of a template's key: pytest names the running test in it, which no import reads.
_NOT_KEYED = frozenset({"PYTEST_CURRENT_TEST"})
SWITCH_ENV = "HTAM_WORKER_TEMPLATE"
_KEEP = 2
_START_TIMEOUT_S = 180.0
_REPLY_TIMEOUT_S = 30.0
_POLL_S = 0.02


class WorkerProcess(Protocol):
    """What the evaluator uses of a worker process: a spawned `subprocess.Popen` or a `ForkedWorker`."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class TemplateError(RuntimeError):
    """The template did not start or did not answer; the caller spawns the worker fresh instead."""


class ForkedWorker:
    """What the evaluator needs of a Popen (pid, poll, wait) for a worker forked by a template: the template
    reaps it and writes its exit code to `exit_path`."""

    def __init__(self, pid: int, exit_path: Path, template: WorkerTemplate) -> None:
        self.pid = pid
        self.exit_path = exit_path
        self.template = template
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            if self.exit_path.exists():
                self.returncode = int(self.exit_path.read_text(encoding="utf-8"))
            elif not self.template.alive() and not pid_exists(self.pid):
                self.returncode = -signal.SIGKILL  # lost with its template, which can no longer report it
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (rc := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout or 0.0)
            time.sleep(_POLL_S)
        return rc


class WorkerTemplate:
    """One template process (see the module docstring); `fork` is safe to call from several threads."""

    def __init__(self, python: str, env: dict[str, str]) -> None:
        self._lock = threading.Lock()
        self._workers: list[ForkedWorker] = []
        self.proc = subprocess.Popen(
            [python, "-m", "htam_graph.kernels_runtime.worker.template"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )  # fmt: skip
        if self._line(_START_TIMEOUT_S) != "ready":
            self.close()
            raise TemplateError("the worker template did not start")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def busy(self) -> bool:
        """Some worker forked from this template is still running."""
        self._workers = self._running()
        return bool(self._workers)

    def _running(self) -> list[ForkedWorker]:
        return [w for w in self._workers if w.poll() is None]

    def fork(self, payload: str, env: dict[str, str], cwd: Path, files: dict[str, Path]) -> ForkedWorker:
        """Fork a worker that runs `payload` in `cwd` with `env`; `files`: its stdout, stderr and exit paths."""
        order: dict[str, Any] = {"payload": payload, "env": env, "cwd": str(cwd)}
        order.update({k: str(v) for k, v in files.items()})
        with self._lock:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write((json.dumps(order) + "\n").encode())
                self.proc.stdin.flush()
                answer = json.loads(self._line(_REPLY_TIMEOUT_S) or "null")
            except (OSError, ValueError) as e:
                self.close()
                raise TemplateError(f"the worker template failed: {e}") from e
        if not isinstance(answer, dict) or not isinstance(answer.get("pid"), int):
            self.close()
            raise TemplateError("the worker template did not fork")
        worker = ForkedWorker(answer["pid"], files["exit"], self)
        self._workers = [*self._running(), worker]
        return worker

    def close(self) -> None:
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()  # the template SIGKILLs its children's groups and exits
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _line(self, timeout_s: float) -> str:
        """One line from the template, "" when it ended or did not answer in time."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        return self.proc.stdout.readline().decode().strip() if ready else ""


_templates: OrderedDict[tuple[str, ...], WorkerTemplate] = OrderedDict()
_retiring: list[WorkerTemplate] = []  # evicted while a worker forked from it still ran
_registry_lock = threading.Lock()


def template_for(python: str, base: dict[str, str]) -> WorkerTemplate | None:
    """The live template for `python` and `base` (the workers' environment without their paths), started on
    first use; None when templates are switched off."""
    if os.environ.get(SWITCH_ENV, "1") == "0":
        return None
    key = (python, *sorted(f"{k}={v}" for k, v in base.items() if k not in _NOT_KEYED))
    with _registry_lock:
        _close_idle(_retiring)
        template = _templates.get(key)
        if template is not None and template.alive():
            _templates.move_to_end(key)
            return template
        while len(_templates) >= _KEEP:
            _retiring.append(_templates.popitem(last=False)[1])
        _close_idle(_retiring)
        template = WorkerTemplate(python, base)
        _templates[key] = template
        return template


def release_templates() -> None:
    """Stop every template of this process."""
    with _registry_lock:
        while _templates:
            _templates.popitem()[1].close()
        while _retiring:
            _retiring.pop().close()


def template_pids() -> set[int]:
    """The pids of this process's live templates."""
    with _registry_lock:
        return {t.proc.pid for t in [*_templates.values(), *_retiring] if t.alive()}


def _close_idle(templates: list[WorkerTemplate]) -> None:
    for template in [t for t in templates if not t.busy()]:
        template.close()
        templates.remove(template)
