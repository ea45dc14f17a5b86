"""Process-level pieces of the bench: the GPU locks, the memory budget and killing a worker's whole process tree."""

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

from htam_graph.bench.executors import descendants, kill_tree
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


def _try(path: Path, mode: int) -> bool:
    """Can another open file description (like another process) take `path` in `mode` right now?"""
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_shared_use_admits_other_shared_users_but_no_timer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(gpulock.LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    with gpulock.shared_use(0):
        assert _try(tmp_path / "gpu3.lock", fcntl.LOCK_SH)  # other workers' correctness checks overlap
        assert not _try(tmp_path / "gpu3.lock", fcntl.LOCK_EX)  # nobody times while we use the GPU
        assert _try(tmp_path / "gpu3.turn.lock", fcntl.LOCK_EX)  # the turnstile is only passed through
    with gpulock.timing_lock(0):
        assert not _try(tmp_path / "gpu3.lock", fcntl.LOCK_SH)
    assert _try(tmp_path / "gpu3.lock", fcntl.LOCK_EX)


def test_a_waiting_timer_is_not_starved_by_new_shared_users(tmp_path: Path) -> None:
    """A holds the GPU shared; T queues for the timing lock; B arrives after T: T must time before B gets in."""
    env = {**os.environ, gpulock.LOCK_DIR_ENV: str(tmp_path), "CUDA_VISIBLE_DEVICES": "0"}
    a = _start_lock_user(env, "A", 3.0)
    time.sleep(1.5)  # A is inside (interpreter start included)
    t = _start_lock_user(env, "T", 0.3)
    time.sleep(1.0)  # T is queued on the exclusive lock, holding the turnstile
    b = _start_lock_user(env, "B", 0.3)
    spans = {
        k: tuple(map(float, p.communicate(timeout=60)[0].split())) for k, p in (("A", a), ("T", t), ("B", b))
    }
    assert spans["T"][0] >= spans["A"][1]  # the timer waited for the shared user to leave
    assert spans["B"][0] >= spans["T"][1]  # and the late shared user waited for the timer


def test_a_long_shared_user_does_not_queue_the_others_behind_a_waiting_timer(tmp_path: Path) -> None:
    """A stays inside long (a slow compile); T queues for timing; B arrives later. With a short turnstile hold,
    B's checks run beside A instead of waiting for A and T, and T still times alone after both left."""
    env = {
        **os.environ,
        gpulock.LOCK_DIR_ENV: str(tmp_path),
        gpulock.TURNSTILE_HOLD_ENV: "0.5",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    a = _start_lock_user(env, "A", 5.0)
    time.sleep(1.5)
    t = _start_lock_user(env, "T", 0.3)
    time.sleep(1.0)
    b = _start_lock_user(env, "B", 0.3)
    spans = {
        k: tuple(map(float, p.communicate(timeout=60)[0].split())) for k, p in (("A", a), ("T", t), ("B", b))
    }
    assert spans["B"][0] < spans["A"][1]  # B got in while A was still inside
    assert spans["T"][0] >= max(spans["A"][1], spans["B"][1])  # the timer ran with nobody else inside


def _start_lock_user(env: dict[str, str], role: str, hold: float) -> subprocess.Popen[bytes]:
    script = (
        "import sys, time\n"
        "from htam_graph.kernels_runtime import gpulock\n"
        "role, hold = sys.argv[1], float(sys.argv[2])\n"
        "cm = gpulock.timing_lock(0) if role == 'T' else gpulock.shared_use(0)\n"
        "with cm:\n"
        "    t0 = time.time(); time.sleep(hold); t1 = time.time()\n"
        "print(t0, t1)\n"
    )
    return subprocess.Popen([sys.executable, "-c", script, role, str(hold)], env=env, stdout=subprocess.PIPE)


def test_every_wait_for_the_gpu_is_announced_to_the_listener(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The evaluator stops a request's clock between "queued" and "admitted": each lock and the memory budget
    must bracket their wait, and the listener is only installed inside `wait_listener`."""
    monkeypatch.setenv(gpulock.LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    events: list[tuple[str, str]] = []
    with gpulock.wait_listener(lambda event, kind: events.append((event, kind))):
        with gpulock.memory_budget(0, 10, budget_bytes=100):
            assert events == [("queued", "memory"), ("admitted", "memory")]
            with gpulock.shared_use(0):
                assert events[2:] == [("queued", "shared"), ("admitted", "shared")]
            with gpulock.timing_lock(0):
                assert events[4:] == [("queued", "timing"), ("admitted", "timing")]
    with gpulock.shared_use(0):
        pass
    assert len(events) == 6  # no listener outside the block


def test_a_blocked_timer_reports_queued_until_it_gets_the_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Another process holds the GPU shared; the timer's "admitted" comes only after that holder left."""
    monkeypatch.setenv(gpulock.LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nfrom htam_graph.kernels_runtime import gpulock\n"
            "with gpulock.shared_use(0):\n    print('in', flush=True); time.sleep(2.0)\n",
        ],
        env={**os.environ},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "in"
    stamps: list[tuple[str, float]] = []
    with gpulock.wait_listener(lambda event, _kind: stamps.append((event, time.monotonic()))):
        with gpulock.timing_lock(0):
            inside = time.monotonic()
    holder.wait(timeout=30)
    assert [e for e, _ in stamps] == ["queued", "admitted"]
    assert stamps[1][1] - stamps[0][1] >= 1.0  # the wait (for the holder's 2 s) lay between the two events
    assert stamps[1][1] <= inside


def test_memory_budget_admits_what_fits_and_drops_dead_holders(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(gpulock.LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    ledger = tmp_path / "gpu0.mem.json"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ledger.write_text(f'{{"{dead.pid}": 90}}')  # a worker killed while holding 90 of 100
    with gpulock.memory_budget(0, 60, budget_bytes=100):  # the dead reservation does not count
        assert gpulock.reservations(0) == {os.getpid(): 60}
    assert gpulock.reservations(0) == {}
    with gpulock.memory_budget(0, 500, budget_bytes=100):  # larger than the budget: runs when alone
        assert gpulock.reservations(0) == {os.getpid(): 500}


def test_memory_budget_makes_a_second_evaluation_wait(tmp_path: Path) -> None:
    """Two processes each need 60 of a budget of 100: their reservations never overlap; two of 40 do."""
    script = (
        "import sys, time\n"
        "from htam_graph.kernels_runtime import gpulock\n"
        "with gpulock.memory_budget(0, int(sys.argv[1]), budget_bytes=100):\n"
        "    t0 = time.time(); time.sleep(0.8); t1 = time.time()\n"
        "print(t0, t1)\n"
    )
    env = {**os.environ, gpulock.LOCK_DIR_ENV: str(tmp_path), "CUDA_VISIBLE_DEVICES": "0"}

    def spans(need: int) -> list[tuple[float, ...]]:
        procs = [
            subprocess.Popen([sys.executable, "-c", script, str(need)], env=env, stdout=subprocess.PIPE)
            for _ in range(2)
        ]
        return sorted(tuple(map(float, p.communicate(timeout=60)[0].split())) for p in procs)

    big = spans(60)
    assert big[0][1] <= big[1][0]
    small = spans(40)
    assert small[1][0] < small[0][1]  # both fit: they ran at the same time


def test_memory_need_counts_inputs_outputs_and_parameters() -> None:
    from htam_graph.kernels_runtime.worker import sharing

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(1024, 2048)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x)

    task = types.SimpleNamespace(
        Model=Model, get_init_inputs=lambda: [], get_inputs=lambda: [torch.randn(4096, 1024)]
    )
    inputs, out, params = 4096 * 1024 * 4, 4096 * 2048 * 4, (1024 * 2048 + 2048) * 4
    assert sharing.memory_need_bytes(task) == 10 * (inputs + out) + 2 * params + (256 << 20)
    big = types.SimpleNamespace(  # 6.4 GB of inputs, sized on meta only
        Model=torch.nn.Tanh, get_init_inputs=lambda: [], get_inputs=lambda: [torch.randn(4096, 393216)]
    )
    assert sharing.memory_need_bytes(big) == 10 * 2 * (4096 * 393216 * 4) + (256 << 20)


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
