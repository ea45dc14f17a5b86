"""Schema files shared by both backends: which labels are keyed, which migration files exist, their versions.

Migrations live in `cypher/schema/<dialect>/NNN_<what>.cypher`; NNN is the schema version the file brings the
graph to. Every file is idempotent; `apply_schema` runs the files above the stored version, then records the
highest number in the `(:SchemaVersion {key: 'htam'})` node. Both dialects must reach the same version.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from htam_graph import queries
from htam_graph.errors import StoreError
from htam_graph.ports import Dialect

# Every label whose nodes are MERGEd on the application `key` property: each gets a unique key constraint.
KEYED_LABELS: tuple[str, ...] = (
    "Global",
    "Local",
    "Task",
    "Run",
    "Attempt",
    "Kernel",
    "Gpu",
    "SeedInfo",
    "SchemaVersion",
    "Baseline",
)

_FILE_RE = re.compile(r"^(\d{3})_[a-z0-9_]+$")


@dataclass(frozen=True)
class Migration:
    """One schema file: the version it brings the graph to and its statements."""

    version: int
    name: str
    statements: tuple[str, ...]


def split_statements(text: str) -> tuple[str, ...]:
    """Split a schema file body into statements (each ends with ';'); comments are dropped."""
    body = queries.strip_comments(text)
    return tuple(part.strip() for part in body.split(";") if part.strip())


def migrations(dialect: Dialect) -> list[Migration]:
    """The dialect's schema files in version order; raise StoreError on a misnamed or duplicated version."""
    found: list[Migration] = []
    for name in queries.names(f"schema/{dialect}"):
        match = _FILE_RE.match(name.rsplit("/", 1)[1])
        if match is None:
            raise StoreError(f"schema file {name!r} is not named NNN_<what>.cypher")
        found.append(Migration(int(match.group(1)), name, split_statements(queries.load(name).text)))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise StoreError(f"duplicate schema versions in schema/{dialect}: {versions}")
    return sorted(found, key=lambda m: m.version)


def target_version(dialect: Dialect) -> int:
    """The schema version this htam-graph brings a graph to (the highest migration number)."""
    files = migrations(dialect)
    return files[-1].version if files else 0


def check_not_newer(stored: int | None, target: int, location: str) -> None:
    """Refuse a graph written by a newer htam-graph (its schema may mean things this version does not
    know)."""
    if stored is not None and stored > target:
        raise StoreError(
            f"the graph at {location} has schema version {stored}, newer than this htam-graph supports "
            f"({target}); upgrade htam-graph"
        )


def now_ms() -> int:
    """Epoch milliseconds (the project's time unit in the graph)."""
    return int(time.time() * 1000)
