"""Shared fixtures: a real embedded FalkorDB started by the project's own manager, and fresh graphs on it.

- `embedded_server` (session): `ServerInfo` of an embedded FalkorDB in a short temp folder under /tmp; stopped
  and removed at the end of the session.
- `store` (function): a `GraphStore` on a fresh, empty graph with the schema applied. Parametrised over the
  backends: "falkordb" always runs; "neo4j" runs when `NEO4J_URI` is set and is skipped, saying so, otherwise
  (under `CI=true` it fails instead: scripts/test.sh starts a Neo4j test server, so CI always has one).
- `neo4j_store` (function): a `Neo4jStore` on the emptied test database with the schema applied, for tests that
  need Neo4j itself (skipped or failed as above). `neo4j_server` (function): the connection settings alone.
- `store_factory` (function): `make(graph_name=None, apply_schema=True) -> FalkorDBStore`, for tests that need
  several graphs (export one, import into another); every graph it made is deleted afterwards.
- `pytest_configure` points every evaluator of the run at one shape-variant cache (a fresh folder, removed at
  the end), so a task's variants are selected once per run, not once per evaluation.
- `htam_settings` (function): `Settings` whose embedded home is the session server's and whose graph is fresh,
  for CLI tests (`--home`) and `open_store`; the graph is deleted afterwards.

Neo4j safety: the tests use one database (`NEO4J_DATABASE` or the server default) and must empty it before each
test, because the code under test chooses its own keys. They only do so when the database is empty or carries
the marker node `(:HtamTestMarker {key: 'htam-test-database'})`, which the fixture creates on first use; a
database holding other data without the marker is never touched (the Neo4j tests are skipped with that reason).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from htam_graph.kernels_runtime.parent.evaluator import VARIANT_CACHE_ENV
from htam_graph.ports import GraphStore
from htam_graph.settings import Settings
from htam_graph.store.embedded import EmbeddedServer, ServerInfo
from htam_graph.store.falkordb_store import FalkorDBStore

NEO4J_MARKER_KEY = "htam-test-database"
BACKENDS = ["falkordb", pytest.param("neo4j", marks=pytest.mark.neo4j)]


def unique_graph_name(prefix: str = "t") -> str:
    """A graph name no other test uses."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


_OWN_VARIANT_CACHE: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """One shape-variant cache for every evaluator of this run (`VARIANT_CACHE_ENV`), in a fresh folder: a
    worker whose task was seen before skips the selection (~2 s of meta-device imports per worker), and nothing
    outlives the run. pytest-xdist's workers inherit the folder from the controller; a value already set is
    kept."""
    if VARIANT_CACHE_ENV not in os.environ:
        folder = tempfile.mkdtemp(prefix="htam-test-variants-")
        os.environ[VARIANT_CACHE_ENV] = folder
        _OWN_VARIANT_CACHE.append(folder)


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _OWN_VARIANT_CACHE:
        os.environ.pop(VARIANT_CACHE_ENV, None)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def embedded_server() -> Iterator[ServerInfo]:
    """The session's embedded FalkorDB (short path under /tmp so the unix socket fits)."""
    home = Path(tempfile.mkdtemp(prefix="htam-t-", dir="/tmp"))
    server = EmbeddedServer(home)
    info = server.start()
    try:
        yield info
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def store_factory(embedded_server: ServerInfo) -> Iterator[Callable[..., FalkorDBStore]]:
    """Make FalkorDB stores on fresh graphs of the session server; all are deleted at teardown."""
    made: list[FalkorDBStore] = []

    def make(graph_name: str | None = None, apply_schema: bool = True) -> FalkorDBStore:
        store = FalkorDBStore(embedded_server.socket_path, graph_name or unique_graph_name())
        made.append(store)
        if apply_schema:
            store.apply_schema()
        return store

    yield make
    for store in made:
        store.delete_graph()
        store.close()


@pytest.fixture
def htam_settings(embedded_server: ServerInfo) -> Iterator[Settings]:
    """Settings on the session server's home with a fresh graph name (deleted afterwards)."""
    settings = Settings(htam_home=embedded_server.home, graph_name=unique_graph_name("cli"))
    yield settings
    cleanup = FalkorDBStore(embedded_server.socket_path, settings.graph_name)
    cleanup.delete_graph()
    cleanup.close()


@dataclass(frozen=True)
class Neo4jServer:
    """Where the Neo4j tests connect (from NEO4J_* and, for the repo's test server, HTAM_NEO4J_* variables)."""

    uri: str
    username: str
    password: str
    database: str | None
    http_url: str  # the HTTP connector (Neo4j Browser at http_url + "browser/"); "" when unknown
    import_dir: str  # the server's import folder on this machine (file:/// URLs); "" when unknown


def require_neo4j() -> Neo4jServer:
    """The Neo4j settings, or skip (fail under CI=true) when NEO4J_URI is not set."""
    uri = os.environ.get("NEO4J_URI", "")
    if not uri:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but NEO4J_URI is not set: scripts/test.sh starts the Neo4j test server")
        pytest.skip("NEO4J_URI is not set: the Neo4j backend is not tested here")
    return Neo4jServer(
        uri=uri,
        username=os.environ.get("NEO4J_USERNAME", "neo4j"),
        password=os.environ.get("NEO4J_PASSWORD", ""),
        database=os.environ.get("NEO4J_DATABASE") or None,
        http_url=os.environ.get("HTAM_NEO4J_HTTP_URL", ""),
        import_dir=os.environ.get("HTAM_NEO4J_IMPORT_DIR", ""),
    )


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Iterator[GraphStore]:
    """A GraphStore on a fresh, empty graph with the schema applied, for each backend present."""
    if request.param == "neo4j":
        yield from _neo4j_store(require_neo4j())
        return
    make: Callable[..., FalkorDBStore] = request.getfixturevalue("store_factory")
    yield make()


@pytest.fixture
def neo4j_server() -> Neo4jServer:
    """The Neo4j connection settings (skips, or fails under CI=true, without NEO4J_URI)."""
    return require_neo4j()


@pytest.fixture
def neo4j_store(neo4j_server: Neo4jServer) -> Iterator[GraphStore]:
    """A Neo4jStore on the emptied test database, schema applied; emptied again afterwards."""
    yield from _neo4j_store(neo4j_server)


def _neo4j_store(server: Neo4jServer) -> Iterator[GraphStore]:
    from htam_graph.store.neo4j_store import Neo4jStore

    store = Neo4jStore(server.uri, server.username, server.password, database=server.database)
    try:
        _claim_neo4j_test_database(store)
        _wipe_neo4j_test_data(store)
        store.apply_schema()
        yield store
        _wipe_neo4j_test_data(store)
    finally:
        store.close()


def _claim_neo4j_test_database(store: Any) -> None:
    marker = store.run_text(
        "MATCH (m:HtamTestMarker {key: $key}) RETURN count(m) AS n", {"key": NEO4J_MARKER_KEY}
    )[0]["n"]
    if marker:
        return
    others = store.run_text("MATCH (n) RETURN count(n) AS n")[0]["n"]
    if others:
        pytest.skip(
            "NEO4J_URI database holds data and no (:HtamTestMarker {key: 'htam-test-database'}) node: "
            "refusing to wipe it; point NEO4J_DATABASE at an empty test database"
        )
    store.run_text("MERGE (m:HtamTestMarker {key: $key})", {"key": NEO4J_MARKER_KEY})


def _wipe_neo4j_test_data(store: Any) -> None:
    store.run_text("MATCH (n) WHERE NOT n:HtamTestMarker DETACH DELETE n")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line counting the tests marked `neo4j` by outcome, so a run shows how much ran against Neo4j."""
    outcomes: dict[str, str] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if not isinstance(report, pytest.TestReport) or "neo4j" not in report.keywords:
                continue
            known = outcomes.get(report.nodeid)
            if report.failed:
                outcomes[report.nodeid] = "failed" if report.when == "call" else "error"
            elif report.skipped and known is None:
                outcomes[report.nodeid] = "skipped"
            elif report.passed and report.when == "call" and known is None:
                outcomes[report.nodeid] = "passed"
    if outcomes:
        counts = Counter(outcomes.values())
        text = ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "error", "skipped") if counts[k])
        where = os.environ.get("NEO4J_URI") or "no NEO4J_URI"
        terminalreporter.write_line(f"neo4j-marked tests: {text} ({where})")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Name a failing test on stderr the moment it fails (in the controlling process only), so a run cut short
    by a time limit still says what failed; pytest's own summary comes only at the end."""
    if not report.failed or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    lines = crash.message.splitlines() if crash is not None else report.longreprtext.strip().splitlines()
    first = (lines or ["(no message)"])[0][:240]
    phase = "FAILED" if report.when == "call" else f"ERROR at {report.when}"
    sys.stderr.write(f"\n{phase} {report.nodeid}: {first}\n")
    sys.stderr.flush()


SLOW_LIST = Path(__file__).with_name("slow.txt")
# The longest single test of the default suite (a cold `mypy --strict`, 1.5-3 minutes): it runs first, since at
# the end of a run it kept one worker busy alone while the other had nothing left.
FIRST = "tests/unit/test_style.py::test_mypy_strict"


def _slow_entries() -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in SLOW_LIST.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line]


def _names(entry: str, nodeid: str) -> bool:
    return nodeid == entry or nodeid.startswith((entry + "::", entry + "["))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests tests/slow.txt lists `slow` (over the whole tests/ folder, a stale line is an error), and
    put FIRST first."""
    items.sort(key=lambda item: item.nodeid != FIRST)
    entries = _slow_entries()
    used: set[str] = set()
    for item in items:
        for entry in entries:
            if _names(entry, item.nodeid):
                item.add_marker(pytest.mark.slow)
                used.add(entry)
    whole = [Path(a).resolve() for a in config.args] == [SLOW_LIST.parent.resolve()]
    stale = [e for e in entries if e not in used]
    if whole and stale:
        raise pytest.UsageError(f"{SLOW_LIST.name} names tests that do not exist: {', '.join(stale)}")
