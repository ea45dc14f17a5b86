"""Process-level pieces of the bench: the GPU timing lock and killing a worker's whole process tree."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from htam_graph.cli.executors import descendants, kill_tree
from htam_graph.kernels_runtime import gpulock


def test_lock_is_a_no_op_without_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gpulock.LOCK_DIR_ENV, raising=False)
    assert gpulock.lock_path(0) is None
    with gpulock.timing_lock(0):
        pass


def test_lock_file_names_the_physical_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(gpulock.LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,GPU-ab:cd")
    assert gpulock.lock_path(0) == tmp_path / "gpu5.lock"
    assert gpulock.lock_path(1) == tmp_path / "gpuGPU-ab_cd.lock"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpulock.lock_path(2) == tmp_path / "gpu2.lock"


def test_lock_is_exclusive_while_held(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(gpulock.LOCK_DIR_ENV, str(tmp_path / "locks"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    path = tmp_path / "locks" / "gpu1.lock"

    def try_lock() -> bool:
        # Another open file description behaves like another process for flock.
        fd = os.open(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    with gpulock.timing_lock(0):
        assert not try_lock()
    assert try_lock()


def test_memory_lock_is_its_own_file_and_independent_of_the_timing_lock(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(gpulock.LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")

    def free(name: str) -> bool:
        fd = os.open(tmp_path / name, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    with gpulock.memory_lock(0):
        assert not free("gpu3.mem.lock")
        assert free("gpu3.lock")  # small evaluations still time while a heavy one checks correctness
        with gpulock.timing_lock(0):  # the heavy one takes the timing lock inside the memory lock
            assert not free("gpu3.lock")
    assert free("gpu3.mem.lock") and free("gpu3.lock")


def test_heavy_evaluations_are_those_with_large_inputs() -> None:
    from htam_graph.kernels_runtime import harness

    small = types.SimpleNamespace(get_inputs=lambda: [torch.randn(1024, 1024)])
    big = types.SimpleNamespace(get_inputs=lambda: [torch.randn(4096, 393216)])  # 6.4 GB, built on meta only
    assert harness._input_bytes(small) == 4 << 20 < harness.HEAVY_INPUT_BYTES
    assert harness._input_bytes(big) == 4096 * 393216 * 4 >= harness.HEAVY_INPUT_BYTES


def test_lock_serialises_two_processes(tmp_path: Path) -> None:
    """Two processes each hold the lock for 0.5 s: their held intervals never overlap."""
    script = (
        "import sys, time\n"
        "from htam_graph.kernels_runtime.gpulock import timing_lock\n"
        "with timing_lock(0):\n"
        "    t0 = time.time(); time.sleep(0.5); t1 = time.time()\n"
        "print(t0, t1)\n"
    )
    env = {**os.environ, gpulock.LOCK_DIR_ENV: str(tmp_path), "CUDA_VISIBLE_DEVICES": "0"}
    procs = [
        subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE) for _ in range(2)
    ]
    spans = sorted(tuple(map(float, p.communicate(timeout=60)[0].split())) for p in procs)
    assert spans[0][1] <= spans[1][0]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


# A worker that ignores SIGTERM and has a grandchild in a session of its own (like the evaluator's worker).
_WORKER = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
g = subprocess.Popen(["sleep", "120"], start_new_session=True)
print(g.pid, flush=True)
time.sleep(120)
"""


def test_kill_tree_reaches_grandchildren_in_their_own_session() -> None:
    worker = subprocess.Popen([sys.executable, "-c", _WORKER], stdout=subprocess.PIPE, start_new_session=True)
    assert worker.stdout is not None
    grandchild = int(worker.stdout.readline())
    assert grandchild in descendants(worker.pid)
    assert os.getpgid(grandchild) != os.getpgid(worker.pid)  # killpg of the worker alone would miss it
    started = time.monotonic()
    kill_tree(worker, grace_s=0.5)
    assert worker.returncode is not None and worker.returncode < 0
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)
    assert time.monotonic() - started < 10
