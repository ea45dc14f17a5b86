"""Loads the named Cypher files shipped in `htam_graph.cypher`.

Every statement htam-graph runs is a `.cypher` file with a header:

    // query: <name>
    // params: a, b, c          (or "none")
    // returns: x, y            (or "none")
    // <free text: what it does, why>

Files under `schema/<dialect>/` are schema statements and are not part of the portable set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from htam_graph.errors import QueryError

_PARAM_RE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_PACKAGE = "htam_graph.cypher"


@dataclass(frozen=True)
class Query:
    """One named statement with its declared parameters and returned columns."""

    name: str
    text: str
    params: frozenset[str]
    returns: tuple[str, ...]

    def used_params(self) -> frozenset[str]:
        """Parameters the statement body actually references (comments stripped)."""
        return frozenset(_PARAM_RE.findall(strip_comments(self.text)))


def strip_comments(text: str) -> str:
    """Remove `//` line comments (the portable files keep no `//` inside string literals)."""
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def parse_query(name: str, text: str) -> Query:
    """Parse a `.cypher` file's header; raise QueryError when it is missing or inconsistent."""
    header: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("//"):
            break
        body = stripped[2:].strip()
        field, sep, value = body.partition(":")
        if sep and field.strip() in {"query", "params", "returns"}:
            header[field.strip()] = value.strip()
    for field in ("query", "params", "returns"):
        if field not in header:
            raise QueryError(f"query file {name!r} lacks the '// {field}:' header line")
    if header["query"] != name:
        raise QueryError(f"query file {name!r} declares the name {header['query']!r}")

    def _names(value: str) -> list[str]:
        return [] if value in {"", "none"} else [v.strip().lstrip("$") for v in value.split(",") if v.strip()]

    return Query(name, text, frozenset(_names(header["params"])), tuple(_names(header["returns"])))


@cache
def load(name: str) -> Query:
    """Load a named query (`policy_score` or `schema/falkordb/001_keys`)."""
    resource = resources.files(_PACKAGE).joinpath(f"{name}.cypher")
    if not resource.is_file():
        raise QueryError(f"unknown query {name!r}")
    return parse_query(name, resource.read_text(encoding="utf-8"))


def names(subdir: str = "") -> list[str]:
    """Names of the shipped queries in `subdir` ("" for the portable set), sorted."""
    root = resources.files(_PACKAGE)
    folder = root.joinpath(subdir) if subdir else root
    if not folder.is_dir():
        return []
    prefix = f"{subdir}/" if subdir else ""
    return sorted(
        prefix + entry.name[: -len(".cypher")]
        for entry in folder.iterdir()
        if entry.is_file() and entry.name.endswith(".cypher")
    )


def check_params(query: Query, params: dict[str, object]) -> None:
    """Raise QueryError unless the given parameters are exactly the declared ones."""
    given = frozenset(params)
    if given != query.params:
        missing = sorted(query.params - given)
        extra = sorted(given - query.params)
        raise QueryError(f"query {query.name!r}: missing parameters {missing}, unexpected {extra}")
