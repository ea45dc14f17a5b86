"""Graph store adapter: Neo4j (when a URI is configured) or the embedded FalkorDB (the default).

    from htam_graph.store import open_store, store_session
    store = open_store(settings)          # schema applied; caller closes
    with store_session(settings) as store:
        rows = store.run("policy_score", {...})

Importing this package does no work: the drivers are imported when a store is opened.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from htam_graph.ports import GraphStore
from htam_graph.settings import Settings


def open_store(settings: Settings, *, apply_schema: bool = True) -> GraphStore:
    """Open the configured store: Neo4j when `settings.graph_uri` is set, else the embedded FalkorDB
    under `settings.htam_home` (started on demand) on graph `settings.graph_name`.

    The schema is applied on open; this is one cheap read when the stored version is current.
    """
    store: GraphStore
    if settings.graph_uri is not None:
        from htam_graph.store.neo4j_store import Neo4jStore

        store = Neo4jStore(
            settings.graph_uri,
            settings.neo4j_username,
            settings.neo4j_password.get_secret_value(),
            database=settings.neo4j_database,
        )
    else:
        from htam_graph.store.embedded import EmbeddedServer
        from htam_graph.store.falkordb_store import FalkorDBStore

        info = EmbeddedServer(settings.htam_home).ensure_running()
        store = FalkorDBStore(info.socket_path, settings.graph_name)
    if apply_schema:
        try:
            store.apply_schema()
        except BaseException:
            store.close()
            raise
    return store


@contextlib.contextmanager
def store_session(settings: Settings, *, apply_schema: bool = True) -> Iterator[GraphStore]:
    """`open_store` as a context manager that closes the connection on exit."""
    store = open_store(settings, apply_schema=apply_schema)
    try:
        yield store
    finally:
        store.close()


__all__ = ["open_store", "store_session"]
