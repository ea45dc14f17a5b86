"""Entry point of `htam-graph`: the click group, global options, and the one-line error mapping.

Usage errors exit 2 (click); every `HtamError` exits 1 with one line on stderr, never a traceback.
"""

from __future__ import annotations

import logging
from typing import Any

import click

from htam_graph import __version__
from htam_graph.cli.config import build_settings
from htam_graph.errors import HtamError


class _Group(click.Group):
    """Maps HtamError to one line and exit 1, KeyboardInterrupt to exit 130."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HtamError as e:
            click.echo(f"error: {e}", err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="htam-graph")
@click.option(
    "--graph",
    "graph_uri",
    metavar="URI",
    help="Neo4j URI (neo4j:// or bolt://); default: the embedded FalkorDB [env NEO4J_URI].",
)
@click.option(
    "--home",
    "htam_home",
    type=click.Path(file_okay=False),
    help="Data folder of the embedded store [env HTAM_HOME, default ~/.htam-graph].",
)
@click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), help="TOML config file [env HTAM_CONFIG]."
)
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
@click.pass_context
def cli(
    ctx: click.Context, graph_uri: str | None, htam_home: str | None, config_path: str | None, verbose: int
) -> None:
    """htam-graph: GPU kernels written in a loop guided by a Hierarchical Transition Graph memory.

    The memory lives in a graph database: the embedded FalkorDB by default (started on demand, unix
    socket only), or Neo4j with --graph / NEO4J_URI.
    """
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )
    flags = {"graph_uri": graph_uri, "htam_home": htam_home}
    ctx.obj = build_settings(flags, config_path=config_path)


def _register() -> None:
    # Sub-command modules are imported here, not at package import, so `import htam_graph.cli` does no work.
    from htam_graph.cli import commands

    commands.register(cli)


def main() -> None:
    """Console-script entry point."""
    _register()
    cli.main(prog_name="htam-graph")


if __name__ == "__main__":  # pragma: no cover
    main()
