"""`htam-graph db start | status | stop` on a real embedded server in a private home."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from htam_graph.cli.main import _register, cli
from htam_graph.settings import Settings
from htam_graph.store import store_session
from htam_graph.store.embedded import EmbeddedServer
from htam_graph.store.schema import target_version

_CLEAN_ENV = {"NEO4J_URI": "", "HTAM_HOME": "", "HTAM_CONFIG": "", "HTAM_GRAPH_NAME": ""}


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="htam-c-", dir="/tmp"))
    yield path
    EmbeddedServer(path).stop()
    shutil.rmtree(path, ignore_errors=True)


def _db(*args: str) -> Result:
    _register()
    return CliRunner(env=_CLEAN_ENV).invoke(cli, list(args), catch_exceptions=False)


def test_start_status_stop_cycle(home: Path) -> None:
    result = _db("--home", str(home), "db", "status")
    assert result.exit_code == 0 and "not running" in result.output

    result = _db("--home", str(home), "db", "start")
    assert result.exit_code == 0, result.output
    info = EmbeddedServer(home).status()
    assert info is not None
    assert result.output.strip() == (
        f"embedded FalkorDB started (pid {info.pid}, socket {info.socket_path}, data {info.data_dir})"
    )

    again = _db("--home", str(home), "db", "start")
    assert again.exit_code == 1
    assert again.output.strip() == (
        f"error: embedded FalkorDB already running (pid {info.pid}, socket {info.socket_path})"
    )

    with store_session(Settings(htam_home=home, graph_name="cli_graph")) as store:
        store.run_text("CREATE (:Global {key: 'a'}), (:Global {key: 'b'})")  # type: ignore[attr-defined]

    text = _db("--home", str(home), "db", "status")
    assert text.exit_code == 0
    for expected in (f"pid:      {info.pid}", f"socket:   {info.socket_path}", f"data dir: {info.data_dir}"):
        assert expected in text.output
    version = target_version("falkordb")
    assert (
        f"graph:    cli_graph (3 nodes, schema v{version})" in text.output
    )  # 2 globals + the SchemaVersion node

    report = json.loads(_db("--home", str(home), "db", "status", "--json").output)
    assert report["running"] is True and report["pid"] == info.pid
    assert report["graphs"] == [{"name": "cli_graph", "nodes": 3, "schema_version": version}]
    assert report["server_version"].startswith("FalkorDB ")

    stopped = _db("--home", str(home), "db", "stop")
    assert stopped.exit_code == 0 and "stopped" in stopped.output
    assert EmbeddedServer(home).status() is None
    twice = _db("--home", str(home), "db", "stop")
    assert twice.exit_code == 0 and "not running" in twice.output


def test_status_does_not_create_a_graph(home: Path) -> None:
    EmbeddedServer(home).start()
    report = json.loads(_db("--home", str(home), "db", "status", "--json").output)
    assert report["graphs"] == []


def _refused_uri() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"bolt://127.0.0.1:{s.getsockname()[1]}"


def test_neo4j_status_unreachable_is_one_line() -> None:
    uri = _refused_uri()
    result = _db("--graph", uri, "db", "status")
    assert result.exit_code == 1
    assert result.output == f"error: cannot reach Neo4j at {uri}: connection refused\n"


@pytest.mark.parametrize("action", ["start", "stop"])
def test_start_and_stop_refuse_neo4j(action: str) -> None:
    result = _db("--graph", "bolt://127.0.0.1:7687", "db", action)
    assert result.exit_code == 1
    assert "manages the embedded FalkorDB" in result.output and result.output.count("\n") == 1
