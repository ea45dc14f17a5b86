"""`htam-graph memory push --to URI` / `memory pull --from URI`: copy the memory bank between the configured
store (the embedded FalkorDB by default) and a Neo4j server, through the portable bank format
(`htam_graph.bank`: export to a temporary file, import on the other side). Import merges on keys and replays
attempts it does not hold, so pushing or pulling twice changes nothing the second time.

Credentials for the Neo4j side come from the settings (NEO4J_USERNAME / NEO4J_PASSWORD / NEO4J_DATABASE or
the config file), never from a flag, so a password never lands in shell history.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from htam_graph import bank, memory
from htam_graph.errors import ConfigError
from htam_graph.ports import GraphStore
from htam_graph.settings import Settings

NEO4J_SCHEMES = ("neo4j://", "neo4j+s://", "neo4j+ssc://", "bolt://", "bolt+s://", "bolt+ssc://")


def copy_bank(source: GraphStore, target: GraphStore) -> tuple[bank.Manifest, bank.ImportCounts]:
    """Export `source`'s bank to a temporary file and merge it into `target`."""
    with tempfile.TemporaryDirectory(prefix="htam-bank-") as tmp:
        path = Path(tmp) / "bank.jsonl"
        manifest = bank.export_bank(source, path)
        counts = bank.import_bank(target, path)
    return manifest, counts


def _remote_settings(settings: Settings, uri: str) -> Settings:
    if not uri.startswith(NEO4J_SCHEMES):
        raise ConfigError(f"expected a neo4j:// or bolt:// URI, got {uri!r}")
    if settings.graph_uri == uri:
        raise ConfigError(f"{uri} is the configured store itself: nothing to copy")
    return settings.model_copy(update={"graph_uri": uri})


def _copy(settings: Settings, remote_uri: str, push: bool) -> str:
    from htam_graph.store import store_session
    from htam_graph.store.neo4j_store import safe_uri

    remote_settings = _remote_settings(settings, remote_uri)
    # The remote is opened first: an unreachable server fails before the local store is touched.
    with store_session(remote_settings) as remote, store_session(settings) as local:
        if push:
            memory.ensure_seeded(local)  # as every memory command: the local memory always holds the seed
            manifest, counts = copy_bank(local, remote)
        else:
            manifest, counts = copy_bank(remote, local)
    where = f"{'to' if push else 'from'} {safe_uri(remote_uri)}"  # never echo a password in the URI
    return (
        f"{'pushed' if push else 'pulled'} {sum(manifest.nodes.values())} nodes {where}: "
        f"{counts.attempts_new} new attempts, {counts.attempts_known} already there"
    )


@click.command("push")
@click.option("--to", "uri", required=True, metavar="URI", help="Neo4j server to copy the memory to.")
@click.pass_context
def push_cmd(ctx: click.Context, uri: str) -> None:
    """Copy the memory bank of the configured store to a Neo4j server (merging, idempotent)."""
    click.echo(_copy(ctx.obj, uri, push=True))


@click.command("pull")
@click.option("--from", "uri", required=True, metavar="URI", help="Neo4j server to copy the memory from.")
@click.pass_context
def pull_cmd(ctx: click.Context, uri: str) -> None:
    """Copy the memory bank of a Neo4j server into the configured store (merging, idempotent)."""
    click.echo(_copy(ctx.obj, uri, push=False))
