"""What the Cypher-running stores (FalkorDB, Neo4j) share: named queries, raw text, migrations, health.

Both run a statement through one backend method, `_execute`, and name where they are with `_location`; the
checks around a named query, the migration walk and the health report are the same for both, so they live
here once and neither backend can drift from the other.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from htam_graph import queries
from htam_graph.ports import Dialect, StoreHealth
from htam_graph.store import schema
from htam_graph.store.values import check_columns, check_values

log = logging.getLogger(__name__)


class CypherStore:
    """A `GraphStore` whose backend runs Cypher text; subclasses give `_execute` and the hooks below."""

    dialect: Dialect

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
        """Run the schema files above the stored version (each idempotent), then `_finish_schema`, and
        record the version; return it. A graph already at the target version costs one read."""
        target = schema.target_version(self.dialect)
        stored = self.schema_version()
        schema.check_not_newer(stored, target, self._location())
        if stored is not None and stored == target:
            return target
        for migration in schema.migrations(self.dialect):
            if stored is not None and migration.version <= stored:
                continue
            for statement in migration.statements:
                self._schema_statement(statement, migration.name)
        self._finish_schema()
        self.run("schema_version_set", {"version": target, "updated_ms": schema.now_ms()})
        log.info("schema of %s at version %d", self._location(), target)
        return target

    def health(self) -> StoreHealth:
        """Reach the server and read the schema version; never raises."""
        try:
            version = self._server_probe()
            return StoreHealth(
                ok=True,
                dialect=self.dialect,
                location=self._location(),
                server_version=version,
                schema_version=self.schema_version(),
            )
        except Exception as e:  # noqa: BLE001 - health reports every failure as data
            return StoreHealth(ok=False, dialect=self.dialect, location=self._location(), detail=str(e))

    # -- extras ----------------------------------------------------------------------------------------
    def run_text(self, text: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run raw Cypher text. For tests and diagnostics only: shipped code runs named `.cypher` files."""
        values = dict(params or {})
        check_values("<text>", values)
        return self._execute(text, values, what="statement")[1]

    def schema_version(self) -> int | None:
        """The recorded schema version, or None for a graph never migrated."""
        rows = self.run("schema_version_get")
        return int(rows[0]["version"]) if rows else None

    # -- backend hooks ---------------------------------------------------------------------------------
    def _execute(
        self, text: str, params: dict[str, Any], what: str
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """Run `text` with `params`; return the column names and the rows (plain values)."""
        raise NotImplementedError

    def _location(self) -> str:
        """Where the graph is, for messages (never with a password)."""
        raise NotImplementedError

    def _server_probe(self) -> str:
        """Reach the server (raising when it cannot be reached) and return its version string."""
        raise NotImplementedError

    def _schema_statement(self, statement: str, migration: str) -> None:
        """Run one statement of the schema file `migration`."""
        self._execute(statement, {}, what=f"schema file {migration!r}")

    def _finish_schema(self) -> None:
        """What the backend does after the schema files and before the version is recorded."""
