"""`GraphStore` on Neo4j with the official `neo4j` driver (one driver per store, managed transactions).

Every statement goes through `driver.execute_query`, which runs it in a managed transaction and retries
transient failures (deadlocks, leader switches). Reads are routed to readers, writes to the leader.
Connection failures become one line (`cannot reach Neo4j at bolt://h:7687: connection refused`); the password
is never part of any message.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from htam_graph import queries
from htam_graph.errors import StoreError, StoreUnavailable
from htam_graph.ports import Dialect
from htam_graph.store.cypher_store import CypherStore
from htam_graph.store.values import to_plain

log = logging.getLogger(__name__)

_SCHEMES = ("neo4j", "neo4j+s", "neo4j+ssc", "bolt", "bolt+s", "bolt+ssc")
# CALL: a procedure may write (apoc.import.json), and Neo4j refuses a write sent in read access mode
_WRITE_RE = re.compile(r"\b(CREATE|MERGE|SET|DELETE|REMOVE|DROP|FOREACH|CALL)\b", re.IGNORECASE)
_ERRNO_RE = re.compile(r"\[Errno -?\d+\]\s*")


def safe_uri(uri: str) -> str:
    """The URI without any user:password@ part, fit for messages."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "<unparsable URI>"
    if "@" not in parts.netloc:
        return uri
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def uri_problem(uri: str) -> str:
    """What is wrong with a Neo4j URI, or "" when it looks usable (the driver checks the rest)."""
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    if scheme not in _SCHEMES:
        return f"use one of {', '.join(s + '://' for s in _SCHEMES)}"
    try:
        parts = urlsplit(uri)
        _ = parts.port  # raises ValueError on a non-numeric or out-of-range port
    except ValueError as e:
        return f"bad host or port ({e})"
    if parts.username or parts.password:
        return "put the user name and password in NEO4J_USERNAME / NEO4J_PASSWORD, not in the URI"
    if not parts.hostname:
        return "no host"
    return ""


def is_write(text: str) -> bool:
    """Whether a statement may write (routing: writes go to the leader). False positives are harmless."""
    return bool(_WRITE_RE.search(queries.strip_comments(text)))


def _reason(e: Exception) -> str:
    """The last useful clause of a driver connection error, e.g. 'connection refused'."""
    text = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
    match = re.search(r"\(reason (.*)\)\s*$", text)
    if match:
        text = match.group(1)
    elif ": " in text:
        text = text.rsplit(": ", 1)[1]
    text = _ERRNO_RE.sub("", text).strip().rstrip(".")
    return text[:1].lower() + text[1:]


def _entity(value: Any) -> dict[str, Any] | None:
    from neo4j.graph import Node, Path, Relationship

    if isinstance(value, Node | Relationship):
        return {str(k): to_plain(v, _entity) for k, v in value.items()}
    if isinstance(value, Path):
        return {
            "nodes": [_entity(n) for n in value.nodes],
            "relationships": [_entity(r) for r in value.relationships],
        }
    return None


@contextlib.contextmanager
def _quiet_driver_logs() -> Iterator[None]:
    # The driver logs its own warning for a failed connection; we raise one line instead of two.
    logger = logging.getLogger("neo4j")
    before = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(before)


class Neo4jStore(CypherStore):
    """A Neo4j database reached over Bolt (`neo4j://` or `bolt://`)."""

    dialect: Dialect = "neo4j"

    def __init__(self, uri: str, username: str, password: str, *, database: str | None = None) -> None:
        import neo4j

        self.uri = safe_uri(uri)
        self.username = username
        self.database = database
        problem = uri_problem(uri)
        if problem:
            raise StoreUnavailable(f"invalid Neo4j URI {self.uri}: {problem}")
        # Driver messages can quote the URI (with any user:password@ in it): scrub secrets from every message.
        self._secrets = tuple(x for x in (password, urlsplit(uri).password if "://" in uri else None) if x)
        try:
            self._driver = neo4j.GraphDatabase.driver(uri, auth=(username, password))
        except (neo4j.exceptions.ConfigurationError, ValueError) as e:
            raise StoreUnavailable(self._scrub(f"invalid Neo4j URI {self.uri}: {_reason(e)}")) from e
        try:
            with _quiet_driver_logs():
                self._driver.verify_connectivity()
                if database is not None:  # an unknown database name fails here, not at the first query
                    self._execute("RETURN 1 AS ok", {}, what="connection check")
        except BaseException as e:
            self._driver.close()
            if isinstance(e, StoreError):
                raise
            raise self._connection_error(e) from e

    # -- GraphStore ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the driver and its connection pool."""
        self._driver.close()

    # -- extras ----------------------------------------------------------------------------------------
    def node_count(self) -> int:
        """Number of nodes in the database."""
        return int(self.run_text("MATCH (n) RETURN count(n) AS n")[0]["n"])

    # -- internals -------------------------------------------------------------------------------------
    def _execute(
        self, text: str, params: dict[str, Any], what: str
    ) -> tuple[list[str], list[dict[str, Any]]]:
        import neo4j

        routing = neo4j.RoutingControl.WRITE if is_write(text) else neo4j.RoutingControl.READ
        try:
            records, _summary, keys = self._driver.execute_query(
                text, params, routing_=routing, database_=self.database
            )
        except (
            neo4j.exceptions.ServiceUnavailable,
            neo4j.exceptions.SessionExpired,
            neo4j.exceptions.AuthError,
        ) as e:
            raise self._connection_error(e) from e
        except neo4j.exceptions.Neo4jError as e:
            raise StoreError(self._scrub(f"{what} failed on Neo4j: {e.code}: {e.message}")) from e
        except neo4j.exceptions.DriverError as e:
            raise StoreError(self._scrub(f"{what} failed on Neo4j: {e}")) from e
        columns = [str(k) for k in keys]
        rows = [{c: to_plain(record[c], _entity) for c in columns} for record in records]
        return columns, rows

    def _location(self) -> str:
        return self.uri

    def _server_probe(self) -> str:
        return str(self._driver.get_server_info().agent)

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _connection_error(self, e: BaseException) -> StoreError:
        error = self._classify(e)
        return type(error)(self._scrub(str(error)))

    def _classify(self, e: BaseException) -> StoreError:
        import neo4j

        if isinstance(e, neo4j.exceptions.AuthError):
            return StoreUnavailable(
                f"Neo4j rejected the credentials for user {self.username!r} at {self.uri}"
            )
        if isinstance(e, neo4j.exceptions.ConfigurationError | ValueError):
            return StoreUnavailable(f"invalid Neo4j URI {self.uri}: {_reason(e)}")
        if isinstance(e, neo4j.exceptions.Neo4jError):
            return StoreUnavailable(f"Neo4j at {self.uri} refused the connection: {e.code}: {e.message}")
        if isinstance(e, neo4j.exceptions.DriverError | OSError):
            return StoreUnavailable(f"cannot reach Neo4j at {self.uri}: {_reason(e)}")
        if isinstance(e, Exception):
            return StoreUnavailable(f"cannot reach Neo4j at {self.uri}: {type(e).__name__}: {e}")
        raise e
