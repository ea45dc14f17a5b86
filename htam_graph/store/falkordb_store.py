"""`GraphStore` on the embedded FalkorDB, over its unix socket with the `falkordb` client (RESP).

Known engine behaviour callers must respect (pinned by tests/integration/test_store_falkordb_traps.py):
two consecutive SET clauses need a WITH barrier, batches must be pre-aggregated per key, sum() of integers is
a float, and doubles come back to the client with 15 significant digits (stored values keep full precision).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from htam_graph.errors import StoreError, StoreUnavailable
from htam_graph.ports import Dialect
from htam_graph.store import schema
from htam_graph.store.cypher_store import CypherStore
from htam_graph.store.values import to_plain

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


class FalkorDBStore(CypherStore):
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
    def close(self) -> None:
        """Close the client connections (the server keeps running)."""
        self._db.close()

    # -- extras ----------------------------------------------------------------------------------------
    def schema_version(self) -> int | None:
        """The recorded schema version, or None for a graph never migrated (a missing graph is not
        created)."""
        if self.graph_name not in self.graph_names():
            return None  # any GRAPH.QUERY, even a MATCH, would create the graph
        return super().schema_version()

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

    def _schema_statement(self, statement: str, migration: str) -> None:
        self._tolerant(statement)

    def _tolerant(self, statement: str) -> None:
        """Run a schema statement; an index that exists already is not an error."""
        try:
            self._execute(statement, {}, what="schema statement")
        except StoreError as e:
            if "already indexed" not in str(e):
                raise

    def _finish_schema(self) -> None:
        self._create_unique_constraints()

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

    def _server_probe(self) -> str:
        self._call(self._db.connection.ping, what="PING")
        return self.server_version()

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
