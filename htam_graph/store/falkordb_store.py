"""`GraphStore` on the embedded FalkorDB, over its unix socket with the `falkordb` client (RESP).

Known engine behaviour callers must respect (pinned by tests/integration/test_store_falkordb_traps.py):
two consecutive SET clauses need a WITH barrier, batches must be pre-aggregated per key, sum() of integers is
a float, and doubles come back to the client with 15 significant digits (stored values keep full precision).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from htam_graph import queries
from htam_graph.errors import StoreError, StoreUnavailable
from htam_graph.ports import Dialect, StoreHealth
from htam_graph.store import schema
from htam_graph.store.values import check_columns, check_values, to_plain

log = logging.getLogger(__name__)

_CONSTRAINT_WAIT_S = 30.0


def _entity(value: Any) -> dict[str, Any] | None:
    from falkordb import Edge, Node, Path  # lazy: importing this module does no work

    if isinstance(value, Node | Edge):
        return {str(k): to_plain(v, _entity) for k, v in value.properties.items()}
    if isinstance(value, Path):
        return {
            "nodes": [_entity(n) for n in value.nodes()],
            "relationships": [_entity(e) for e in value.edges()],
        }
    return None


class FalkorDBStore:
    """One graph (`graph_name`) of an embedded FalkorDB server reached through `socket_path`."""

    dialect: Dialect = "falkordb"

    def __init__(self, socket_path: Path, graph_name: str = "htam") -> None:
        import redis
        from falkordb import FalkorDB

        self.socket_path = Path(socket_path)
        self.graph_name = graph_name
        try:
            # The constructor already talks to the server (INFO), so a dead socket fails here, not later.
            # retry=None (no resend): a write resent after a lost reply would apply its increments twice.
            self._db = FalkorDB(
                unix_socket_path=str(self.socket_path), socket_connect_timeout=5.0, retry=None
            )
        except (redis.RedisError, OSError) as e:
            raise StoreUnavailable(f"cannot reach the embedded FalkorDB at {self.socket_path}: {e}") from e
        self._graph = self._db.select_graph(graph_name)

    # -- GraphStore ------------------------------------------------------------------------------------
    def run(self, name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run the named query; return its rows as dicts keyed by the declared columns."""
        query = queries.load(name)
        values = dict(params or {})
        queries.check_params(query, values)
        check_values(name, values)
        columns, rows = self._execute(query.text, values, what=f"query {name!r}")
        if columns or query.returns:
            check_columns(query, columns)
        return rows

    def apply_schema(self) -> int:
        """Create the key indexes and unique constraints (idempotent); return the schema version."""
        target = schema.target_version(self.dialect)
        stored = self.schema_version()
        schema.check_not_newer(stored, target, self._location())
        if stored is not None and stored == target:
            return target
        for migration in schema.migrations(self.dialect):
            if stored is not None and migration.version <= stored:
                continue
            for statement in migration.statements:
                self._tolerant(statement)
        self._create_unique_constraints()
        self.run("schema_version_set", {"version": target, "updated_ms": schema.now_ms()})
        log.info("schema of graph %s at version %d", self.graph_name, target)
        return target

    def health(self) -> StoreHealth:
        """PING the server and read the schema version; never raises."""
        try:
            self._call(self._db.connection.ping, what="PING")
            version = self.server_version()
            return StoreHealth(
                ok=True,
                dialect=self.dialect,
                location=self._location(),
                server_version=version,
                schema_version=self.schema_version(),
            )
        except Exception as e:  # noqa: BLE001 - health reports every failure as data
            return StoreHealth(ok=False, dialect=self.dialect, location=self._location(), detail=str(e))

    def close(self) -> None:
        """Close the client connections (the server keeps running)."""
        self._db.close()

    # -- extras ----------------------------------------------------------------------------------------
    def run_text(self, text: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run raw Cypher text. For tests and diagnostics only: shipped code runs named `.cypher` files."""
        values = dict(params or {})
        check_values("<text>", values)
        return self._execute(text, values, what="statement")[1]

    def schema_version(self) -> int | None:
        """The recorded schema version, or None for a graph never migrated (a missing graph is not
        created)."""
        if self.graph_name not in self.graph_names():
            return None  # any GRAPH.QUERY, even a MATCH, would create the graph
        rows = self.run("schema_version_get")
        return int(rows[0]["version"]) if rows else None

    def node_count(self) -> int:
        """Number of nodes in this graph (0 for a graph that does not exist yet; it is not created)."""
        if self.graph_name not in self.graph_names():
            return 0
        return int(self.run_text("MATCH (n) RETURN count(n) AS n")[0]["n"])

    def graph_names(self) -> list[str]:
        """Graphs held by the server."""
        return sorted(self._call(self._db.list_graphs, what="GRAPH.LIST"))

    def delete_graph(self) -> None:
        """Delete this graph with its indexes (tests, and `db` administration). Missing graph: no-op."""
        if self.graph_name in self.graph_names():
            self._call(self._graph.delete, what="GRAPH.DELETE")

    # -- internals -------------------------------------------------------------------------------------
    def _execute(
        self, text: str, params: dict[str, Any], what: str
    ) -> tuple[list[str], list[dict[str, Any]]]:
        result = self._call(lambda: self._graph.query(text, params or None), what=what)
        columns = [str(h[1]) for h in result.header]
        rows = [
            {c: to_plain(v, _entity) for c, v in zip(columns, row, strict=True)} for row in result.result_set
        ]
        return columns, rows

    def _call(self, fn: Any, what: str) -> Any:
        import redis

        try:
            return fn()
        except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
            raise StoreUnavailable(f"lost the embedded FalkorDB at {self.socket_path}: {e}") from e
        except redis.RedisError as e:
            raise StoreError(f"{what} failed on FalkorDB graph {self.graph_name!r}: {e}") from e

    def _tolerant(self, statement: str) -> None:
        try:
            self._execute(statement, {}, what="schema statement")
        except StoreError as e:
            if "already indexed" not in str(e):
                raise

    def _create_unique_constraints(self) -> None:
        for label in schema.KEYED_LABELS:
            try:
                self._call(
                    lambda label=label: self._db.execute_command(
                        "GRAPH.CONSTRAINT",
                        "CREATE",
                        self.graph_name,
                        "UNIQUE",
                        "NODE",
                        label,
                        "PROPERTIES",
                        1,
                        "key",
                    ),
                    what=f"unique constraint on {label}.key",
                )
            except StoreError as e:
                if "already exists" not in str(e):
                    raise
        self._wait_constraints()

    def _wait_constraints(self) -> None:
        """Constraint creation is asynchronous (PENDING → OPERATIONAL, or FAILED on duplicate keys)."""
        deadline = time.monotonic() + _CONSTRAINT_WAIT_S
        while True:
            rows = self._call(self._graph.list_constraints, what="db.constraints()")
            status = {str(r["label"]): str(r["status"]) for r in rows if r["type"] == "UNIQUE"}
            failed = sorted(label for label, s in status.items() if s == "FAILED")
            if failed:
                raise StoreError(
                    f"unique key constraint failed on {failed} in graph {self.graph_name!r}: "
                    "duplicate keys exist"
                )
            missing = [label for label in schema.KEYED_LABELS if status.get(label) != "OPERATIONAL"]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise StoreError(
                    f"unique key constraints on {missing} still pending after {_CONSTRAINT_WAIT_S:.0f} s"
                )
            time.sleep(0.05)

    def server_version(self) -> str:
        """'FalkorDB X.Y.Z' as reported by the loaded module."""
        modules = self._call(
            lambda: self._db.connection.execute_command("MODULE", "LIST"), what="MODULE LIST"
        )
        for entry in modules:
            fields = dict(zip(entry[::2], entry[1::2], strict=True))
            if fields.get("name") == "graph":
                ver = int(fields["ver"])
                return f"FalkorDB {ver // 10000}.{ver // 100 % 100}.{ver % 100}"
        return "FalkorDB (version unknown)"

    def _location(self) -> str:
        return f"{self.socket_path} graph {self.graph_name}"
