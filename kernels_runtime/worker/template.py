"""The worker template: a process that imports torch, Triton and the worker's modules once, then forks one fresh
worker per evaluation (`python -m htam_graph.kernels_runtime.worker.template`, driven by parent/templates.py).

Importing torch is most of a CPU evaluation's cost (~3.5 s of a ~5 s smoke evaluation on 2 cores). A forked
child is a new process like a spawned one: its own pid and session, its own address space (a copy of the
template's, which never ran candidate or tensor code), the request's environment, working directory and output
files, and the payload in memory as the spawned worker gets it on stdin. The template never runs candidate code.

Protocol on the template's stdin/stdout, one JSON object per line:
- the template prints `ready` once its imports are done;
- an order `{"payload", "env", "cwd", "stdout", "stderr", "exit"}` makes it fork; it answers `{"pid": n}`;
- when it reaps a child it writes the child's exit code (Popen's convention: -N for signal N) to the order's
  `exit` path, atomically;
- end of stdin (the parent closed it or died) ends the template, after it SIGKILLs its children's process groups.
"""

from __future__ import annotations

import io
import json
import os
import select
import signal
import sys
import traceback
from typing import Any, NoReturn

from htam_graph.kernels_runtime.worker import __main__ as worker

__all__ = ["main"]

_REAP_EVERY_S = 0.1


def _child(order: dict[str, Any]) -> NoReturn:
    """The forked worker: its own session, the order's environment, files and payload, then the worker's main."""
    code = 1
    try:
        os.setsid()
        os.chdir(order["cwd"])
        os.environ.clear()
        os.environ.update(order["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(order["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(order["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)  # also closes the template's control pipes on fds 0 and 1
            os.close(fd)
        sys.stdin = io.StringIO(order["payload"])
        code = worker.main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _write_exit(path: str, code: int) -> None:
    """Report a reaped child's exit code; its run folder may be gone already (the evaluator stopped waiting)."""
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(str(code))
        os.replace(tmp, path)
    except OSError:
        pass


def _reap(children: dict[int, str]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        path = children.pop(pid, None)
        if path is not None:
            _write_exit(path, os.waitstatus_to_exitcode(status))


def _kill_children(children: dict[int, str]) -> None:
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def main() -> int:
    control = sys.stdin.buffer
    reply = sys.stdout
    children: dict[int, str] = {}
    reply.write("ready\n")
    reply.flush()
    while True:
        _reap(children)
        ready, _, _ = select.select([control], [], [], _REAP_EVERY_S)
        if not ready:
            continue
        line = control.readline()
        if not line:
            _kill_children(children)
            return 0
        order = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(order)
        children[pid] = order["exit"]
        reply.write(json.dumps({"pid": pid}) + "\n")
        reply.flush()


if __name__ == "__main__":
    sys.exit(main())
