"""A cross-process lock that keeps GPU timing serial when several evaluations share one GPU.

`htam-graph bench --workers N` runs N evaluations at once; compiling and checking correctness may overlap, but
two timed loops on one GPU would slow each other down and corrupt both measurements. The timed section of the
harness runs inside `timing_lock(device_index)`: an exclusive `fcntl.flock` on `$HTAM_GPU_LOCK_DIR/gpu<id>.lock`,
where `<id>` is the physical GPU (the entry of `CUDA_VISIBLE_DEVICES` for that index, so workers that see
different GPUs as `cuda:0` never share a lock, and workers on the same GPU always do). The kernel releases the
lock when the holder dies, so a killed worker never blocks the others.

When `HTAM_GPU_LOCK_DIR` is unset (a single `htam-graph run`), the lock is a no-op.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from pathlib import Path

__all__ = ["LOCK_DIR_ENV", "lock_path", "memory_lock", "timing_lock"]

LOCK_DIR_ENV = "HTAM_GPU_LOCK_DIR"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def _physical_id(device_index: int) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    entries = [e.strip() for e in visible.split(",") if e.strip()] if visible else []
    if 0 <= device_index < len(entries):
        return _UNSAFE.sub("_", entries[device_index])
    return str(device_index)


def lock_path(device_index: int = 0) -> Path | None:
    """The lock file of the GPU behind `cuda:<device_index>`, or None when locking is off."""
    folder = os.environ.get(LOCK_DIR_ENV)
    if not folder:
        return None
    return Path(folder) / f"gpu{_physical_id(device_index)}.lock"


@contextlib.contextmanager
def timing_lock(device_index: int = 0) -> Iterator[None]:
    """Hold the GPU's timing lock for the duration of the block (blocks until it is free)."""
    with _flock(lock_path(device_index)):
        yield


@contextlib.contextmanager
def memory_lock(device_index: int = 0) -> Iterator[None]:
    """Hold the GPU's memory lock (`gpu<id>.mem.lock`): one memory-heavy evaluation per GPU at a time.

    Always taken before the timing lock, never inside it, so the two cannot deadlock."""
    path = lock_path(device_index)
    with _flock(path.with_suffix(".mem.lock") if path is not None else None):
        yield


@contextlib.contextmanager
def _flock(path: Path | None) -> Iterator[None]:
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
