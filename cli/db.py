"""`htam-graph db start | status | stop`: manage the embedded FalkorDB server of the home folder.

Other commands start the server on demand, so `db start` is only needed to start it ahead of time.
`db start` while it runs is an error (exit 1); `db stop` while it is stopped says so and exits 0 (stopping is
idempotent, so scripts can always call it). With Neo4j configured (--graph / NEO4J_URI), `db status` reports
on Neo4j and `start`/`stop` refuse: that server is not ours to manage.
"""

from __future__ import annotations

import json
from typing import Any

import click

from htam_graph.errors import ConfigError
from htam_graph.settings import Settings


def _settings(ctx: click.Context) -> Settings:
    settings = ctx.find_object(Settings)
    if settings is None:  # pragma: no cover - the root group always builds one
        raise ConfigError("internal: no settings")
    return settings


def _refuse_neo4j(settings: Settings, action: str) -> None:
    if settings.uses_neo4j:
        raise ConfigError(
            f"db {action} manages the embedded FalkorDB; Neo4j ({settings.graph_uri}) is run by you"
        )


@click.group("db")
def db() -> None:
    """Start, inspect or stop the embedded graph database (FalkorDB on a unix socket, no TCP port)."""


@db.command("start")
@click.pass_context
def start(ctx: click.Context) -> None:
    """Start the embedded FalkorDB server in the background (error if it already runs)."""
    from htam_graph.store.embedded import EmbeddedServer

    settings = _settings(ctx)
    _refuse_neo4j(settings, "start")
    info = EmbeddedServer(settings.htam_home).start(exclusive=True)
    click.echo(f"embedded FalkorDB started (pid {info.pid}, socket {info.socket_path}, data {info.data_dir})")


@db.command("stop")
@click.pass_context
def stop(ctx: click.Context) -> None:
    """Stop the embedded FalkorDB server cleanly (exit 0 when it was not running)."""
    from htam_graph.store.embedded import EmbeddedServer

    settings = _settings(ctx)
    _refuse_neo4j(settings, "stop")
    server = EmbeddedServer(settings.htam_home)
    if server.stop():
        click.echo(f"embedded FalkorDB stopped (data kept in {server.data_dir})")
    else:
        click.echo(f"embedded FalkorDB is not running (home {server.home})")


@db.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show whether the graph database runs, where, and what it holds."""
    settings = _settings(ctx)
    report = _neo4j_status(settings) if settings.uses_neo4j else _embedded_status(settings)
    if as_json:
        click.echo(json.dumps(report, sort_keys=True))
        return
    for line in _format(report):
        click.echo(line)


def _embedded_status(settings: Settings) -> dict[str, Any]:
    from htam_graph.store.embedded import EmbeddedServer
    from htam_graph.store.falkordb_store import FalkorDBStore

    server = EmbeddedServer(settings.htam_home)
    report: dict[str, Any] = {
        "backend": "falkordb",
        "home": str(server.home),
        "data_dir": str(server.data_dir),
    }
    info = server.status()
    if info is None:
        return report | {"running": False}
    report |= {"running": True, "pid": info.pid, "socket": str(info.socket_path), "log": str(info.log_path)}
    probe = FalkorDBStore(info.socket_path, settings.graph_name)
    try:
        report["server_version"] = probe.server_version()
        graphs = []
        for name in probe.graph_names():
            graph = FalkorDBStore(info.socket_path, name)
            try:
                graphs.append(
                    {"name": name, "nodes": graph.node_count(), "schema_version": graph.schema_version()}
                )
            finally:
                graph.close()
        report["graphs"] = graphs
    finally:
        probe.close()
    return report


def _neo4j_status(settings: Settings) -> dict[str, Any]:
    from htam_graph.store.neo4j_store import Neo4jStore

    store = Neo4jStore(
        settings.graph_uri or "",
        settings.neo4j_username,
        settings.neo4j_password.get_secret_value(),
        database=settings.neo4j_database,
    )
    try:
        health = store.health()
        return {
            "backend": "neo4j",
            "running": health.ok,
            "uri": health.location,
            "database": settings.neo4j_database or "(default)",
            "server_version": health.server_version,
            "schema_version": health.schema_version,
            "nodes": store.node_count(),
        }
    finally:
        store.close()


def _format(report: dict[str, Any]) -> list[str]:
    if report["backend"] == "neo4j":
        return [
            f"Neo4j: {'reachable' if report['running'] else 'unreachable'} at {report['uri']}",
            f"  database:       {report['database']}",
            f"  server:         {report['server_version']}",
            f"  schema version: {report['schema_version']}",
            f"  nodes:          {report['nodes']}",
        ]
    if not report["running"]:
        return [f"embedded FalkorDB: not running (home {report['home']}, data {report['data_dir']})"]
    lines = [
        "embedded FalkorDB: running",
        f"  pid:      {report['pid']}",
        f"  socket:   {report['socket']}",
        f"  data dir: {report['data_dir']}",
        f"  log:      {report['log']}",
        f"  server:   {report['server_version']}",
    ]
    graphs = report.get("graphs") or []
    if not graphs:
        lines.append("  graphs:   (none yet)")
    for graph in graphs:
        version = "unversioned" if graph["schema_version"] is None else f"schema v{graph['schema_version']}"
        lines.append(f"  graph:    {graph['name']} ({graph['nodes']} nodes, {version})")
    return lines
