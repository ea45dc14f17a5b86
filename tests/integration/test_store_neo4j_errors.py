"""Neo4j connection failures become one clear line, for real (a refused port, unresolvable and malformed URIs).

These need no server; the contract suite runs against a real Neo4j via the `store` fixture when NEO4J_URI is
set (scripts/test.sh starts scripts/neo4j-test-server for it).
"""

from __future__ import annotations

import socket

import pytest

from htam_graph.errors import StoreUnavailable
from htam_graph.settings import Settings
from htam_graph.store import open_store
from htam_graph.store.neo4j_store import Neo4jStore, is_write, safe_uri

PASSWORD = "s3cret-Pa55word"


def _refused_port() -> int:
    # Bind then close: nothing listens there afterwards, so connecting is refused at once.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("scheme", ["bolt", "neo4j"])
def test_refused_port_is_one_line_without_password(scheme: str) -> None:
    uri = f"{scheme}://127.0.0.1:{_refused_port()}"
    with pytest.raises(StoreUnavailable) as err:
        Neo4jStore(uri, "neo4j", PASSWORD)
    message = str(err.value)
    assert message.startswith(f"cannot reach Neo4j at {uri}: ")
    assert "\n" not in message
    assert PASSWORD not in message
    if scheme == "bolt":
        assert message.endswith("connection refused")


def test_unresolvable_host_is_one_line() -> None:
    with pytest.raises(StoreUnavailable) as err:
        Neo4jStore("bolt://no-such-host.invalid:7687", "neo4j", PASSWORD)
    assert str(err.value).startswith("cannot reach Neo4j at bolt://no-such-host.invalid:7687: ")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "uri", ["bolt://127.0.0.1:notaport", "bolt://x:y:z", "http://localhost:7474", "localhost:7687"]
)
def test_malformed_uri_is_one_line(uri: str) -> None:
    with pytest.raises(StoreUnavailable, match="invalid Neo4j URI") as err:
        Neo4jStore(uri, "neo4j", PASSWORD)
    assert "\n" not in str(err.value)
    assert PASSWORD not in str(err.value)


def test_credentials_in_uri_never_reach_messages() -> None:
    uri = f"bolt://neo4j:{PASSWORD}@127.0.0.1:{_refused_port()}"
    assert PASSWORD not in safe_uri(uri)
    with pytest.raises(StoreUnavailable) as err:
        Neo4jStore(uri, "neo4j", PASSWORD)
    assert PASSWORD not in str(err.value)


def test_open_store_selects_neo4j_when_a_uri_is_set(tmp_path: object) -> None:
    settings = Settings(graph_uri=f"bolt://127.0.0.1:{_refused_port()}", neo4j_password=PASSWORD)
    with pytest.raises(StoreUnavailable, match="cannot reach Neo4j"):
        open_store(settings)


def test_write_detection_routes_writes_to_the_leader() -> None:
    assert is_write("MERGE (n:Global {key: $k})")
    assert is_write("MATCH (n) DETACH DELETE n")
    assert is_write("MATCH (n) SET n.x = 1")
    assert is_write("CALL apoc.import.json($url, {})")  # a procedure may write
    assert not is_write("// MERGE in a comment\nMATCH (n) RETURN n.key AS key")
    assert not is_write("MATCH (n:Global) RETURN n.created_ms AS t")  # 'created' is not CREATE
