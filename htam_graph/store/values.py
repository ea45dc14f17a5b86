"""Parameter checks and result conversion shared by both backends (pure functions, no driver imports)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from htam_graph.errors import QueryError
from htam_graph.queries import Query

_SCALARS = (str, bool, int, float, type(None))


def check_values(query_name: str, params: Mapping[str, Any]) -> None:
    """Raise QueryError for a parameter value neither engine can take faithfully.

    FalkorDB receives parameters as text in a `CYPHER a=...` header: NaN and infinity have no literal there
    (they become a syntax error deep in the server), and other Python types would be printed with `str()`.
    """
    for key, value in params.items():
        _check_value(query_name, key, value)


def _check_value(query_name: str, path: str, value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise QueryError(f"query {query_name!r}: parameter {path} is {value}, not a finite number")
    if isinstance(value, _SCALARS):
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_value(query_name, f"{path}[{i}]", item)
        return
    if isinstance(value, Mapping):
        for k, item in value.items():
            if not isinstance(k, str) or not k or "`" in k:
                raise QueryError(
                    f"query {query_name!r}: parameter {path} has a map key {k!r} (need a plain string)"
                )
            _check_value(query_name, f"{path}.{k}", item)
        return
    raise QueryError(f"query {query_name!r}: parameter {path} has unsupported type {type(value).__name__}")


def check_columns(query: Query, columns: list[str]) -> None:
    """Raise QueryError when a statement returned other columns than its header declares."""
    if tuple(columns) != query.returns:
        raise QueryError(
            f"query {query.name!r} returned columns {columns} but its header declares {list(query.returns)}"
        )


def to_plain(value: Any, entity: Callable[[Any], dict[str, Any] | None]) -> Any:
    """Convert a driver value to plain Python: nodes/relationships become property dicts (via `entity`)."""
    props = entity(value)
    if props is not None:
        return props
    if isinstance(value, Mapping):
        return {str(k): to_plain(v, entity) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(v, entity) for v in value]
    return value
