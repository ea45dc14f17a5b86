"""Pure pieces of the store adapter: parameter checks, result conversion, schema files, socket paths."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from htam_graph.errors import QueryError, StoreError
from htam_graph.queries import Query
from htam_graph.store import schema
from htam_graph.store.embedded import socket_path_for
from htam_graph.store.values import check_columns, check_values, to_plain


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (float("nan"), "params.x is nan, not a finite number"),
        (float("inf"), "not a finite number"),
        ([1.0, float("-inf")], r"params.x\[1\] is -inf"),
        ({"a": {"b": float("nan")}}, "params.x.a.b is nan"),
        ({1: "a"}, "map key 1"),
        ({"a`b": 1}, "map key"),
        (Path("/tmp"), "unsupported type PosixPath"),
        ({1, 2}, "unsupported type set"),
    ],
)
def test_check_values_refuses_what_engines_cannot_take(value: Any, message: str) -> None:
    with pytest.raises(QueryError, match=message):
        check_values("q", {"params.x": value})


def test_check_values_accepts_plain_json_like_values() -> None:
    check_values(
        "q", {"a": None, "b": True, "c": 1, "d": 1.5, "e": "s", "f": [1, "x", None], "g": {"k": [1]}}
    )


def test_check_columns_compares_with_the_header() -> None:
    query = Query("q", "", frozenset(), ("a", "b"))
    check_columns(query, ["a", "b"])
    with pytest.raises(
        QueryError, match=r"returned columns \['b', 'a'\] but its header declares \['a', 'b'\]"
    ):
        check_columns(query, ["b", "a"])


class _Entity:
    def __init__(self, props: dict[str, Any]) -> None:
        self.props = props


def test_to_plain_converts_entities_inside_containers() -> None:
    def entity(v: Any) -> dict[str, Any] | None:
        return dict(v.props) if isinstance(v, _Entity) else None

    value = {"n": _Entity({"key": "a"}), "l": [_Entity({"key": "b"}), 1, (2, 3)], "s": "x"}
    assert to_plain(value, entity) == {"n": {"key": "a"}, "l": [{"key": "b"}, 1, [2, 3]], "s": "x"}


def test_split_statements_drops_comments_and_blank_parts() -> None:
    text = "// header\nCREATE INDEX A;\n// note\nCREATE INDEX B; // trailing\n\n"
    assert schema.split_statements(text) == ("CREATE INDEX A", "CREATE INDEX B")


@pytest.mark.parametrize("dialect", ["falkordb", "neo4j"])
def test_migrations_are_numbered_and_ordered(dialect: str) -> None:
    files = schema.migrations(dialect)  # type: ignore[arg-type]
    assert [m.version for m in files] == sorted({m.version for m in files})
    assert files[0].version == 1 and schema.target_version(dialect) == files[-1].version  # type: ignore[arg-type]
    assert all(m.statements for m in files)


def test_a_newer_graph_is_refused() -> None:
    schema.check_not_newer(None, 1, "x")
    schema.check_not_newer(1, 1, "x")
    with pytest.raises(StoreError, match="schema version 2, newer than this htam-graph supports \\(1\\)"):
        schema.check_not_newer(2, 1, "x")


def test_socket_path_is_in_home_unless_too_long(tmp_path: Path) -> None:
    short = tmp_path / "h"
    assert socket_path_for(short) == short.resolve() / "falkordb.sock"
    long_home = tmp_path / ("y" * 150)
    path = socket_path_for(long_home)
    assert path.parent.name.startswith(f"htam-{os.getuid()}-") and len(os.fsencode(path)) <= 100
    assert socket_path_for(long_home) == path  # stable per home
    assert socket_path_for(tmp_path / ("z" * 150)) != path  # distinct homes, distinct sockets
