"""Cross-process coordination of bench workers that share one GPU: honest timing and no out-of-memory storms.

`htam-graph bench --workers N` runs N evaluations at once and several of them can land on one GPU. Two rules:

- **Timing runs alone on its GPU.** Every piece of device work of an evaluation (building the models, the
  correctness trials, the recheck) holds the GPU's *shared* lock; the timed section holds it *exclusively*, so no
  other worker's kernels run inside a timed window (they would be time-sliced with the timed kernels and inflate
  them unevenly). The one exception is the torch.compile warm-up (minutes of CPU work under load, one forward on
  the GPU), see timed.time_and_recheck. A timer waiting for the exclusive lock closes a turnstile that new shared holders
  pass through, so a stream of correctness checks cannot starve it (writer preference). It keeps the turnstile
  closed for at most `HTAM_GPU_TURNSTILE_HOLD_S` (default 10 s) at a time: when one shared user stays inside
  longer (a candidate whose Triton compile and autotuning take minutes), the turnstile reopens briefly, so the
  other workers' correctness checks go on beside it instead of queueing behind the timer for minutes.
- **Device memory is budgeted.** Before any device work an evaluation reserves its estimated peak memory in the
  GPU's ledger and waits while the reservations of live workers would exceed the budget (default 85 % of the
  device). One evaluation larger than the budget still runs when it is alone.

Locks are `fcntl.flock`s on files under `$HTAM_GPU_LOCK_DIR` named after the physical GPU (the entry of
`CUDA_VISIBLE_DEVICES` for the index, so workers that see different GPUs as `cuda:0` never share a lock, and
workers on the same GPU always do): `gpu<id>.lock` (shared/exclusive), `gpu<id>.turn.lock` (turnstile),
`gpu<id>.mem.lock` + `gpu<id>.mem.json` (the ledger, keyed by pid). The kernel releases a flock when its holder
dies and the ledger drops reservations of dead pids, so a killed worker never blocks the others.

Order, which makes deadlock impossible: memory reservation first, then shared or exclusive use, never a
reservation while holding the shared lock, and the shared lock is released before the exclusive one is taken.
When `HTAM_GPU_LOCK_DIR` is unset (a single `htam-graph run`), everything here is a no-op.

Waiting here is not the candidate's time. Every wait (for the memory budget, the turnstile, the shared or the
exclusive lock) is announced to the listener installed with `wait_listener` ("queued" before, "admitted" after,
each with what it waits for: "memory", "shared" or "timing");
the worker forwards these to its progress file and the evaluator stops the request's timeout clock between them.
On a shared H200 a "timing" phase can wait over a minute for the exclusive lock around a timed loop of under
1 s; on the candidate's clock such waits would time out honest candidates.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "LOCK_DIR_ENV",
    "MEMORY_FRACTION_ENV",
    "TURNSTILE_HOLD_ENV",
    "lock_path",
    "memory_budget",
    "reservations",
    "shared_use",
    "timing_lock",
    "wait_listener",
]

LOCK_DIR_ENV = "HTAM_GPU_LOCK_DIR"
MEMORY_FRACTION_ENV = "HTAM_GPU_MEMORY_FRACTION"
DEFAULT_MEMORY_FRACTION = 0.85
TURNSTILE_HOLD_ENV = "HTAM_GPU_TURNSTILE_HOLD_S"
DEFAULT_TURNSTILE_HOLD_S = 10.0
_REOPEN_S = 0.5  # how long a timer leaves the turnstile open for waiting shared users before closing it again
_POLL_S = 0.2
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
# told (event, kind) around every wait (wait_listener): event "queued" / "admitted", kind what it waits for
_listener: Callable[[str, str], None] | None = None


@contextlib.contextmanager
def wait_listener(listener: Callable[[str, str], None]) -> Iterator[None]:
    """Within the block, `listener("queued", kind)` / `listener("admitted", kind)` bracket every wait for this
    GPU; kind is "memory" (the budget), "shared" (device work) or "timing" (the exclusive lock)."""
    global _listener
    previous, _listener = _listener, listener
    try:
        yield
    finally:
        _listener = previous


@contextlib.contextmanager
def _waiting(kind: str) -> Iterator[None]:
    listener = _listener
    if listener is not None:
        listener("queued", kind)
    try:
        yield
    finally:
        if listener is not None:
            listener("admitted", kind)


def _physical_id(device_index: int) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    entries = [e.strip() for e in visible.split(",") if e.strip()] if visible else []
    if 0 <= device_index < len(entries):
        return _UNSAFE.sub("_", entries[device_index])
    return str(device_index)


def lock_path(device_index: int = 0) -> Path | None:
    """The shared/exclusive lock file of the GPU behind `cuda:<device_index>`, or None when locking is off."""
    folder = os.environ.get(LOCK_DIR_ENV)
    if not folder:
        return None
    return Path(folder) / f"gpu{_physical_id(device_index)}.lock"


def _sibling(device_index: int, suffix: str) -> Path | None:
    path = lock_path(device_index)
    return None if path is None else path.with_suffix(suffix)


def shared_use(device_index: int = 0) -> contextlib.AbstractContextManager[None]:
    """Device work that may overlap other workers' device work, but never a timed section."""
    return _through_turnstile(device_index, fcntl.LOCK_SH)


def timing_lock(device_index: int = 0) -> contextlib.AbstractContextManager[None]:
    """The GPU to ourselves for a timed section: waits until every shared user has left."""
    return _through_turnstile(device_index, fcntl.LOCK_EX)


@contextlib.contextmanager
def _through_turnstile(device_index: int, mode: int) -> Iterator[None]:
    """Take the GPU's lock in `mode` after passing the turnstile. A shared user waits there behind a queued
    timer; a timer holds it while it waits for the exclusive lock (for a bounded time, `_enter_exclusive`), so
    no new shared user gets in meanwhile."""
    path = lock_path(device_index)
    turn = _sibling(device_index, ".turn.lock")
    if path is None or turn is None:
        yield
        return
    with _waiting("timing" if mode == fcntl.LOCK_EX else "shared"):
        if mode == fcntl.LOCK_EX:
            fd = _enter_exclusive(path, turn)
        else:
            with _flock(turn, fcntl.LOCK_EX):
                fd = _acquire(path, mode)
    try:
        yield
    finally:
        _release(fd)


def _turnstile_hold_s() -> float:
    try:
        return max(0.0, float(os.environ.get(TURNSTILE_HOLD_ENV, DEFAULT_TURNSTILE_HOLD_S)))
    except ValueError:
        return DEFAULT_TURNSTILE_HOLD_S


def _enter_exclusive(path: Path, turn: Path) -> int:
    """The exclusive lock, taken with the turnstile closed. The turnstile stays closed at most the hold time
    at a stretch; while a shared user is still inside after that, it reopens for `_REOPEN_S` so the shared
    users queued behind it pass, then closes again."""
    hold = _turnstile_hold_s()
    while True:
        with _flock(turn, fcntl.LOCK_EX):
            deadline = time.monotonic() + hold
            while True:
                fd = _try_acquire(path, fcntl.LOCK_EX)
                if fd is not None:
                    return fd
                if time.monotonic() >= deadline:
                    break
                time.sleep(_POLL_S)
        time.sleep(_REOPEN_S)


def _budget_bytes(device_index: int) -> int:
    import torch

    fraction = float(os.environ.get(MEMORY_FRACTION_ENV, DEFAULT_MEMORY_FRACTION))
    return int(torch.cuda.get_device_properties(device_index).total_memory * fraction)


@contextlib.contextmanager
def memory_budget(device_index: int, need_bytes: int, budget_bytes: int | None = None) -> Iterator[None]:
    """Reserve `need_bytes` of the GPU's memory budget for the block (waits until it fits or we are alone)."""
    lock = _sibling(device_index, ".mem.lock")
    if lock is None or need_bytes <= 0:
        yield
        return
    ledger = lock.with_suffix(".json")
    budget = _budget_bytes(device_index) if budget_bytes is None else budget_bytes
    me = str(os.getpid())
    with _waiting("memory"):
        while True:
            with _flock(lock, fcntl.LOCK_EX):
                held = _live(_read(ledger))
                if not held or sum(held.values()) + need_bytes <= budget:
                    held[me] = need_bytes
                    _write(ledger, held)
                    break
            time.sleep(_POLL_S)
    try:
        yield
    finally:
        with _flock(lock, fcntl.LOCK_EX):
            held = _live(_read(ledger))
            held.pop(me, None)
            _write(ledger, held)


def reservations(device_index: int = 0) -> dict[int, int]:
    """Live reservations on the GPU's ledger: pid -> bytes (for tests and diagnostics)."""
    lock = _sibling(device_index, ".mem.lock")
    if lock is None:
        return {}
    with _flock(lock, fcntl.LOCK_EX):
        return {int(pid): n for pid, n in _live(_read(lock.with_suffix(".json"))).items()}


def _read(ledger: Path) -> dict[str, int]:
    try:
        data = json.loads(ledger.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _write(ledger: Path, held: dict[str, int]) -> None:
    tmp = ledger.with_name(ledger.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(held), encoding="utf-8")
    os.replace(tmp, ledger)


def _live(held: dict[str, int]) -> dict[str, int]:
    alive = {}
    for pid, n in held.items():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            continue  # its holder died without releasing: the reservation goes with it
        except (PermissionError, ValueError):
            pass
        alive[pid] = n
    return alive


def _acquire(path: Path, mode: int) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _try_acquire(path: Path, mode: int) -> int | None:
    """The lock in `mode` if it is free now, else None."""
    try:
        return _acquire(path, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return None


def _release(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _flock(path: Path | None, mode: int = fcntl.LOCK_EX) -> Iterator[None]:
    if path is None:
        yield
        return
    fd = _acquire(path, mode)
    try:
        yield
    finally:
        _release(fd)
