"""Schema migrations on the real embedded FalkorDB: version bookkeeping, only newer files run, newer graphs refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from htam_graph.errors import StoreError
from htam_graph.store import schema
from htam_graph.store.falkordb_store import FalkorDBStore

Factory = Callable[..., FalkorDBStore]


def test_fresh_graph_gets_indexes_constraints_and_version(store_factory: Factory) -> None:
    store = store_factory(apply_schema=False)
    assert store.schema_version() is None
    assert store.apply_schema() == schema.target_version("falkordb")
    constraints = store.run_text(
        "CALL db.constraints() YIELD label, status RETURN label, status ORDER BY label ASC"
    )
    assert constraints == [{"label": label, "status": "OPERATIONAL"} for label in sorted(schema.KEYED_LABELS)]
    assert store.schema_version() == schema.target_version("falkordb")


def test_only_migrations_above_the_stored_version_run(
    store_factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_factory()
    real = schema.migrations("falkordb")
    extra = schema.Migration(
        real[-1].version + 1, "schema/falkordb/999_test", ("CREATE INDEX FOR (n:Global) ON (n.name)",)
    )
    monkeypatch.setattr(schema, "migrations", lambda dialect: [*real, extra])
    monkeypatch.setattr(schema, "target_version", lambda dialect: extra.version)
    ran: list[str] = []
    original = FalkorDBStore._tolerant
    monkeypatch.setattr(FalkorDBStore, "_tolerant", lambda self, s: (ran.append(s), original(self, s))[1])
    assert store.apply_schema() == extra.version
    assert ran == list(extra.statements)
    assert store.schema_version() == extra.version
    ran.clear()
    assert store.apply_schema() == extra.version  # current: nothing runs
    assert ran == []


def test_a_graph_from_a_newer_htam_graph_is_refused(store_factory: Factory) -> None:
    store = store_factory()
    store.run("schema_version_set", {"version": 99, "updated_ms": 0})
    with pytest.raises(StoreError, match="schema version 99, newer than this htam-graph supports"):
        store.apply_schema()


def test_duplicate_keys_make_the_constraint_fail_loudly(store_factory: Factory) -> None:
    store = store_factory(apply_schema=False)
    store.run_text("CREATE (:Global {key: 'dup'}), (:Global {key: 'dup'})")
    with pytest.raises(StoreError, match=r"unique key constraint failed on \['Global'\].*duplicate keys"):
        store.apply_schema()
    assert store.schema_version() is None  # not recorded as migrated
