"""Regression tests for the silent traps of docs/graph-portability.md (and two found while building the store).

Each trap has two tests: one pins the engine's CURRENT behaviour on FalkorDB (if an upgrade changes it, this test
fails and tells us to revisit the rule), and one proves the workaround gives the right answer on every backend.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from htam_graph.errors import StoreUnavailable
from htam_graph.ports import GraphStore
from htam_graph.store.embedded import EmbeddedServer
from htam_graph.store.falkordb_store import FalkorDBStore

Factory = Callable[..., FalkorDBStore]

TWO_SETS = "MATCH (n:Global {key: 'a'}) SET n.x = n.x + 1 SET n.y = n.x * 10 RETURN n.x AS x, n.y AS y"
TWO_SETS_WITH_BARRIER = (
    "MATCH (n:Global {key: 'a'}) SET n.x = n.x + 1 WITH n SET n.y = n.x * 10 RETURN n.x AS x, n.y AS y"
)
# The shape a naive transition update takes: MERGE the edge, then increment it.
MERGE_THEN_INCREMENT = """
UNWIND $rows AS row
MATCH (a:Global {key: row.src}), (b:Global {key: row.dst})
MERGE (a)-[t:TRANSITION]->(b)
ON CREATE SET t.count = 0
WITH t, row
SET t.count = t.count + row.d
"""
MERGE_ON_CREATE_ON_MATCH = """
UNWIND $rows AS row
MATCH (a:Global {key: row.src}), (b:Global {key: row.dst})
MERGE (a)-[t:TRANSITION]->(b)
ON CREATE SET t.count = row.d
ON MATCH SET t.count = t.count + row.d
"""
READ_COUNTS = (
    "MATCH (a:Global)-[t:TRANSITION]->(b:Global) "
    "RETURN a.key AS src, b.key AS dst, t.count AS count ORDER BY src ASC, dst ASC"
)


def _globals(store: GraphStore, *keys: str) -> None:
    store.run_text("UNWIND $keys AS k CREATE (:Global {key: k})", {"keys": list(keys)})  # type: ignore[attr-defined]


# -- two consecutive SET clauses --------------------------------------------------------------------------
def test_falkordb_second_set_does_not_see_the_first(store_factory: Factory) -> None:
    store = store_factory()
    store.run_text("CREATE (:Global {key: 'a', x: 1})")
    assert store.run_text(TWO_SETS) == [{"x": 2, "y": 10}]  # y was computed from the old x


def test_with_barrier_between_sets_is_right(store: GraphStore) -> None:
    store.run_text("CREATE (:Global {key: 'a', x: 1})")  # type: ignore[attr-defined]
    assert store.run_text(TWO_SETS_WITH_BARRIER) == [{"x": 2, "y": 20}]  # type: ignore[attr-defined]


# -- one UNWIND batch naming the same relationship twice ----------------------------------------------------
def test_falkordb_duplicate_rows_in_one_merge_batch_lose_increments(store_factory: Factory) -> None:
    store = store_factory()
    _globals(store, "a", "b")
    store.run_text(MERGE_THEN_INCREMENT, {"rows": [{"src": "a", "dst": "b", "d": 1}] * 3})
    assert store.run_text(READ_COUNTS) == [{"src": "a", "dst": "b", "count": 1}]  # 3 increments, 1 counted


@pytest.fixture
def scratch_server() -> Iterator[EmbeddedServer]:
    """A private server for a test that crashes it (never the session's shared server)."""
    home = Path(tempfile.mkdtemp(prefix="htam-crash-", dir="/tmp"))
    server = EmbeddedServer(home)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


def test_falkordb_duplicate_new_edge_with_on_match_crashes_the_server(scratch_server: EmbeddedServer) -> None:
    """FalkorDB 4.16.3 segfaults on this shape; acknowledged writes before it survive, and start() recovers."""
    info = scratch_server.start()
    store = FalkorDBStore(info.socket_path, "crash")
    _globals(store, "a", "b")
    with pytest.raises(StoreUnavailable):
        store.run_text(MERGE_ON_CREATE_ON_MATCH, {"rows": [{"src": "a", "dst": "b", "d": 1}] * 2})
    store.close()
    restarted = scratch_server.start()
    assert restarted.pid != info.pid
    store = FalkorDBStore(restarted.socket_path, "crash")
    assert store.run_text("MATCH (g:Global) RETURN g.key AS k ORDER BY k ASC") == [{"k": "a"}, {"k": "b"}]
    assert store.run_text(READ_COUNTS) == []  # the crashing statement left nothing half-written
    store.close()


def test_preaggregated_batches_count_every_increment(store: GraphStore) -> None:
    """The rule: aggregate each batch per (src, dst) in Python, so no batch names an edge twice."""
    _globals(store, "a", "b", "c")
    events = [("a", "b")] * 3 + [("a", "c")] + [("b", "c")] * 2
    for _ in range(2):  # second batch: every edge exists already (the ON MATCH path)
        rows = [{"src": s, "dst": d, "d": n} for (s, d), n in sorted(Counter(events).items())]
        store.run_text(MERGE_ON_CREATE_ON_MATCH, {"rows": rows})  # type: ignore[attr-defined]
    assert store.run_text(READ_COUNTS) == [  # type: ignore[attr-defined]
        {"src": "a", "dst": "b", "count": 6},
        {"src": "a", "dst": "c", "count": 2},
        {"src": "b", "dst": "c", "count": 4},
    ]


# -- sum() of integers -------------------------------------------------------------------------------------
def test_falkordb_sum_of_integers_is_a_float(store_factory: Factory) -> None:
    rows = store_factory().run_text("UNWIND [1, 2, 3] AS x RETURN sum(x) AS s")
    assert rows == [{"s": 6.0}] and isinstance(rows[0]["s"], float)


def test_to_integer_of_sum_is_an_integer(store: GraphStore) -> None:
    rows = store.run_text("UNWIND [1, 2, 3] AS x RETURN toInteger(sum(x)) AS s")  # type: ignore[attr-defined]
    assert rows == [{"s": 6}] and isinstance(rows[0]["s"], int)


# -- integer division ---------------------------------------------------------------------------------------
def test_integer_division_truncates_and_float_parameters_do_not(store: GraphStore) -> None:
    rows = store.run_text(
        "RETURN 7 / 2 AS lit, $w / 2 AS int_param, $wf / 2 AS float_param", {"w": 7, "wf": 7.0}
    )  # type: ignore[attr-defined]
    assert rows == [{"lit": 3, "int_param": 3, "float_param": 3.5}]


# -- ORDER BY ties -----------------------------------------------------------------------------------------
def _keys_in_order(store: GraphStore, insert: list[str], order_by: str) -> list[str]:
    store.run_text("MATCH (g:Global) DETACH DELETE g")  # type: ignore[attr-defined]
    for key in insert:
        store.run_text("CREATE (:Global {key: $k, score: 1})", {"k": key})  # type: ignore[attr-defined]
    rows = store.run_text(f"MATCH (g:Global) RETURN g.key AS k ORDER BY {order_by}")  # type: ignore[attr-defined]
    return [r["k"] for r in rows]


def test_falkordb_ties_come_back_in_internal_id_order(store_factory: Factory) -> None:
    """Ties follow internal ids: insertion order on a fresh graph, but FalkorDB reuses the ids of deleted
    nodes at once, so after deletes the same inserts come back in another order."""
    assert _keys_in_order(store_factory(), ["b", "a", "c"], "g.score DESC") == ["b", "a", "c"]
    assert _keys_in_order(store_factory(), ["c", "b", "a"], "g.score DESC") == ["c", "b", "a"]
    reused = store_factory()
    _keys_in_order(reused, ["b", "a", "c"], "g.score DESC")
    assert _keys_in_order(reused, ["c", "b", "a"], "g.score DESC") == ["a", "b", "c"]


def test_tie_break_makes_order_deterministic(store: GraphStore) -> None:
    for insert in (["b", "a", "c"], ["c", "b", "a"]):
        assert _keys_in_order(store, insert, "g.score DESC, g.key ASC") == ["a", "b", "c"]


# -- found while building the store ------------------------------------------------------------------------
def test_falkordb_returns_doubles_with_15_significant_digits(store_factory: Factory) -> None:
    """Stored with full precision (the comparison inside the engine is exact) but printed to the client with
    %.15g: a value read back and written again (export/import) can drift in its 16th-17th digit."""
    store = store_factory()
    exact = 123456789.12345679
    store.run_text("CREATE (:Kernel {key: 'k', f: $f})", {"f": exact})
    rows = store.run_text("MATCH (k:Kernel {key: 'k'}) RETURN k.f AS f, k.f = $f AS same", {"f": exact})
    assert rows == [{"f": 123456789.123457, "same": True}]
    assert rows[0]["f"] != exact


def test_falkordb_to_string_of_a_float_pads_zeros(store_factory: Factory) -> None:
    assert store_factory().run_text("RETURN toString(1.5) AS s") == [{"s": "1.500000"}]
