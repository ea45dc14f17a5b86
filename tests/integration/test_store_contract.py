"""The GraphStore contract, run against every backend present (FalkorDB always; Neo4j when NEO4J_URI is set)."""

from __future__ import annotations

import pytest

from htam_graph.errors import QueryError, StoreError
from htam_graph.ports import GraphStore
from htam_graph.store import schema


def test_store_is_a_graph_store_with_schema_applied(store: GraphStore) -> None:
    assert isinstance(store, GraphStore)
    target = schema.target_version(store.dialect)
    assert target >= 1
    assert store.run("schema_version_get") == [{"version": target}]
    health = store.health()
    assert health.ok, health.detail
    assert health.schema_version == target
    assert health.dialect == store.dialect


def test_apply_schema_twice_is_idempotent(store: GraphStore) -> None:
    first = store.apply_schema()
    second = store.apply_schema()
    assert first == second == schema.target_version(store.dialect)
    assert store.run("schema_version_get") == [{"version": first}]


def test_key_is_unique_for_every_keyed_label(store: GraphStore) -> None:
    run_text = store.run_text  # type: ignore[attr-defined]
    for label in schema.KEYED_LABELS:
        if label == "SchemaVersion":
            continue
        run_text(f"CREATE (:{label} {{key: 'dup'}})")
        with pytest.raises(StoreError):
            run_text(f"CREATE (:{label} {{key: 'dup'}})")
        # MERGE on the key finds the one node instead of creating a second.
        run_text(f"MERGE (:{label} {{key: 'dup'}})")
        assert run_text(f"MATCH (n:{label} {{key: 'dup'}}) RETURN count(n) AS n") == [{"n": 1}]


def test_run_checks_declared_params(store: GraphStore) -> None:
    with pytest.raises(QueryError, match="missing parameters \\['updated_ms'\\]"):
        store.run("schema_version_set", {"version": 1})
    with pytest.raises(QueryError, match="unexpected \\['extra'\\]"):
        store.run("schema_version_get", {"extra": 1})
    with pytest.raises(QueryError, match="unknown query"):
        store.run("no_such_query")


def test_non_finite_parameters_are_refused(store: GraphStore) -> None:
    with pytest.raises(QueryError, match="not a finite number"):
        store.run("schema_version_set", {"version": float("nan"), "updated_ms": 0})
    with pytest.raises(QueryError, match="unsupported type"):
        store.run("schema_version_set", {"version": {1, 2}, "updated_ms": 0})


def test_values_round_trip_through_parameters(store: GraphStore) -> None:
    run_text = store.run_text  # type: ignore[attr-defined]
    # FalkorDB receives parameters pasted into a text header by its client: quoting must survive everything.
    tricky = "quote \" backslash \\ newline \n tab \t apostrophe ' unicode é 🚀 // not a comment"
    stored = {"s": tricky, "i": -(2**62), "f": 0.5, "b": True, "l": [1, 2, 3]}
    run_text("CREATE (:Kernel {key: 'k', s: $s, i: $i, f: $f, b: $b, l: $l})", stored)
    rows = run_text(
        "MATCH (k:Kernel {key: 'k'}) RETURN k.s AS s, k.i AS i, k.f AS f, k.b AS b, k.l AS l, $n AS n, $m AS m",
        {"n": None, "m": {"a": 1, "b c": "x"}},
    )
    assert rows == [stored | {"n": None, "m": {"a": 1, "b c": "x"}}]


def test_nodes_and_relationships_come_back_as_property_dicts(store: GraphStore) -> None:
    run_text = store.run_text  # type: ignore[attr-defined]
    run_text("CREATE (:Global {key: 'a', name: 'tiling'})-[:TRANSITION {count: 2}]->(:Global {key: 'b'})")
    rows = run_text("MATCH (a:Global {key: 'a'})-[t:TRANSITION]->(b:Global) RETURN a, t, b, [a, b] AS both")
    assert rows == [
        {
            "a": {"key": "a", "name": "tiling"},
            "t": {"count": 2},
            "b": {"key": "b"},
            "both": [{"key": "a", "name": "tiling"}, {"key": "b"}],
        }
    ]


def test_query_errors_are_store_errors(store: GraphStore) -> None:
    with pytest.raises(StoreError):
        store.run_text("MATCH (n RETURN n")  # type: ignore[attr-defined]
