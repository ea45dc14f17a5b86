"""The embedded FalkorDB manager, on real servers: lifecycle, crash recovery, isolation, durability, concurrency.

Every test here runs its own server in its own folder (never the session's shared one), since they kill it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from htam_graph.errors import EmbeddedServerError, StoreUnavailable
from htam_graph.settings import Settings
from htam_graph.store import open_store
from htam_graph.store.embedded import EmbeddedServer, ServerInfo, ping, socket_path_for
from htam_graph.store.falkordb_store import FalkorDBStore


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="htam-e-", dir="/tmp"))
    yield path
    EmbeddedServer(path).stop()
    shutil.rmtree(path, ignore_errors=True)


def _kill9(info: ServerInfo) -> None:
    os.kill(info.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while EmbeddedServer(info.home).status() is not None and time.monotonic() < deadline:
        time.sleep(0.02)


# -- lifecycle ---------------------------------------------------------------------------------------------
def test_start_is_idempotent_and_stop_is_clean(home: Path) -> None:
    server = EmbeddedServer(home)
    assert server.status() is None
    info = server.start()
    assert ping(info.socket_path)
    assert server.start() == info  # the same server, not a second one
    assert server.status() == info
    assert (home / "falkordb.pid").read_text().strip() == str(info.pid)
    assert server.stop() is True
    assert server.status() is None
    assert not info.socket_path.exists() and not (home / "falkordb.pid").exists()
    assert (
        not Path(f"/proc/{info.pid}/cmdline").exists()
        or Path(f"/proc/{info.pid}/cmdline").read_bytes() == b""
    )
    assert server.stop() is False  # stopping a stopped server is a no-op


def test_exclusive_start_refuses_a_running_server(home: Path) -> None:
    info = EmbeddedServer(home).start()
    with pytest.raises(EmbeddedServerError) as err:
        EmbeddedServer(home).start(exclusive=True)
    assert str(err.value) == f"embedded FalkorDB already running (pid {info.pid}, socket {info.socket_path})"


def test_server_outlives_the_process_that_started_it(home: Path) -> None:
    script = f"from htam_graph.store.embedded import EmbeddedServer; print(EmbeddedServer({str(home)!r}).start().pid)"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    pid = int(out.stdout.strip())
    info = EmbeddedServer(home).status()
    assert info is not None and info.pid == pid
    assert os.getsid(pid) == pid  # its own session: no signal to the CLI's terminal reaches it


def test_kill_9_leaves_a_stale_pid_that_start_recovers(home: Path) -> None:
    server = EmbeddedServer(home)
    first = server.start()
    _kill9(first)
    assert (home / "falkordb.pid").exists()  # stale: the crash left it behind
    assert server.status() is None
    second = server.start()
    assert second.pid != first.pid and ping(second.socket_path)


def test_pid_file_naming_another_process_is_not_trusted(home: Path) -> None:
    server = EmbeddedServer(home)
    home.mkdir(exist_ok=True)
    (home / "falkordb.pid").write_text(f"{os.getpid()}\n")  # alive, but not a redis-server
    (home / "falkordb.sock").write_text("")  # a stale file where the socket goes
    assert server.status() is None
    info = server.start()
    assert info.pid != os.getpid() and ping(info.socket_path)


def test_start_failure_quotes_the_log(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = EmbeddedServer(home)
    real = EmbeddedServer._command
    monkeypatch.setattr(EmbeddedServer, "_command", lambda self: [*real(self), "--no-such-directive", "1"])
    with pytest.raises(EmbeddedServerError, match="exited during start-up; log tail: .*no-such-directive"):
        server.start()
    assert not (home / "falkordb.pid").exists()


# -- isolation ---------------------------------------------------------------------------------------------
def test_socket_and_folders_are_private(home: Path) -> None:
    info = EmbeddedServer(home).start()
    assert stat.S_ISSOCK(info.socket_path.stat().st_mode)
    assert stat.S_IMODE(info.socket_path.stat().st_mode) == 0o700
    assert stat.S_IMODE(info.data_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


def _tcp_listen_inodes_of(pid: int) -> set[str]:
    """Inodes of the TCP/TCP6 sockets in LISTEN state (0A) that process pid holds open."""
    fds = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            fds.add(target[len("socket:[") : -1])
    listening = set()
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A":
                listening.add(cols[9])
    return fds & listening


@pytest.mark.skipif(not Path("/proc/self/net/tcp").exists(), reason="needs Linux procfs")
def test_no_tcp_port_is_open(home: Path) -> None:
    # Positive control: the probe does see a TCP listener held by this test process.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        probe.listen()
        assert _tcp_listen_inodes_of(os.getpid())
    info = EmbeddedServer(home).start()
    assert _tcp_listen_inodes_of(info.pid) == set()
    cmdline = Path(f"/proc/{info.pid}/cmdline").read_bytes()
    assert b"unixsocket" in cmdline


def test_a_long_home_puts_the_socket_in_a_short_private_folder(home: Path) -> None:
    long_home = home / ("x" * 120)
    assert len(str(long_home / "falkordb.sock")) > 107
    server = EmbeddedServer(long_home)
    try:
        info = server.start()
        assert info.socket_path == socket_path_for(long_home)
        assert len(os.fsencode(info.socket_path)) <= 100
        assert stat.S_IMODE(info.socket_path.parent.stat().st_mode) == 0o700
        assert info.data_dir == long_home / "data"
        store = FalkorDBStore(info.socket_path, "g")
        assert store.apply_schema() >= 1
        store.close()
    finally:
        server.stop()
        shutil.rmtree(socket_path_for(long_home).parent, ignore_errors=True)


def test_open_store_starts_the_server_on_demand(home: Path) -> None:
    store = open_store(Settings(htam_home=home, graph_name="demand"))
    try:
        assert store.dialect == "falkordb"
        assert store.health().ok
        assert EmbeddedServer(home).status() is not None
    finally:
        store.close()


# -- durability --------------------------------------------------------------------------------------------
def test_kill_9_right_after_acknowledged_writes_loses_nothing(home: Path) -> None:
    server = EmbeddedServer(home)
    info = server.start()
    store = FalkorDBStore(info.socket_path, "durable")
    store.apply_schema()
    written = 50
    for i in range(written):  # each statement is acknowledged before the next is sent
        store.run_text("CREATE (:Attempt {key: $k, speedup_x: $s})", {"k": f"a{i}", "s": i + 0.25})
    store.run_text("MATCH (a:Attempt {key: 'a0'}) SET a.speedup_x = 99.5")  # an update as the very last write
    store.close()
    _kill9(info)
    store = FalkorDBStore(server.start().socket_path, "durable")
    rows = store.run_text("MATCH (a:Attempt) RETURN a.key AS k, a.speedup_x AS s ORDER BY s ASC, k ASC")
    expected = {f"a{i}": i + 0.25 for i in range(1, written)} | {"a0": 99.5}
    assert {r["k"]: r["s"] for r in rows} == expected
    assert store.schema_version() is not None  # the schema node survived too
    store.close()


# -- concurrency -------------------------------------------------------------------------------------------
_WORKER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from htam_graph.store.falkordb_store import FalkorDBStore
    socket_path, graph, go, rounds = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    store = FalkorDBStore(Path(socket_path), graph)
    (go.parent / f"ready-{os.getpid()}").touch()
    while not go.exists():
        time.sleep(0.005)
    for _ in range(rounds):
        store.run_text(
            "UNWIND $rows AS row "
            "MATCH (a:Global {key: row.src})-[t:TRANSITION]->(b:Global {key: row.dst}) "
            "SET t.count = t.count + row.d, t.gain_sum = t.gain_sum + row.g",
            {"rows": [{"src": "a", "dst": "b", "d": 1, "g": 0.5}, {"src": "b", "dst": "a", "d": 2, "g": 0.25}]},
        )
    store.close()
    """
)


def test_four_processes_incrementing_the_same_edges_lose_nothing(home: Path) -> None:
    info = EmbeddedServer(home).start()
    store = FalkorDBStore(info.socket_path, "race")
    store.apply_schema()
    store.run_text(
        "CREATE (a:Global {key: 'a'}), (b:Global {key: 'b'}), "
        "(a)-[:TRANSITION {count: 0, gain_sum: 0.0}]->(b), (b)-[:TRANSITION {count: 0, gain_sum: 0.0}]->(a)"
    )
    go, workers, rounds = home / "go", 4, 150
    procs = [
        subprocess.Popen([sys.executable, "-c", _WORKER, str(info.socket_path), "race", str(go), str(rounds)])
        for _ in range(workers)
    ]
    deadline = time.monotonic() + 120
    while len(list(home.glob("ready-*"))) < workers and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()  # every worker is connected: release them together so their writes interleave
    assert [p.wait(timeout=300) for p in procs] == [0] * workers
    rows = store.run_text(
        "MATCH (s:Global)-[t:TRANSITION]->(d:Global) RETURN s.key AS s, t.count AS c, t.gain_sum AS g ORDER BY s ASC"
    )
    assert rows == [
        {"s": "a", "c": workers * rounds, "g": workers * rounds * 0.5},
        {"s": "b", "c": 2 * workers * rounds, "g": workers * rounds * 0.25},
    ]
    store.close()


def test_a_dead_server_fails_fast_and_is_never_resent_to(home: Path) -> None:
    """No client retries: a write resent after a lost reply would apply its increments twice."""
    info = EmbeddedServer(home).start()
    store = FalkorDBStore(info.socket_path, "dead")
    store.run_text("CREATE (:Global {key: 'a'})")
    pool = store._db.connection.connection_pool  # the client's own pool: its connections must not retry
    connection = pool.get_connection()
    assert connection.retry.get_retries() == 0
    pool.release(connection)
    _kill9(info)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="embedded FalkorDB at"):
        store.run_text("MATCH (g:Global) SET g.n = 1")
    assert time.monotonic() - started < 2.0
    store.close()


def test_concurrent_first_starts_make_one_server(home: Path) -> None:
    """Several processes opening the store at once on a fresh home: the lock lets exactly one server start."""
    script = (
        "import sys; from pathlib import Path; from htam_graph.store.embedded import EmbeddedServer; "
        "print(EmbeddedServer(Path(sys.argv[1])).ensure_running().pid)"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(home)], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    pids = {int(p.communicate(timeout=120)[0].strip()) for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(pids) == 1
    running = [
        p
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and str(socket_path_for(home)).encode() in _read(p / "cmdline")
    ]
    assert [int(p.name) for p in running] == list(pids)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
