"""`htam-graph memory ...`: seed, show, suggest, export and import the HTG memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from htam_graph import bank, memory, policy
from htam_graph.ports import GraphStore
from htam_graph.settings import Settings

_TOP_LOCALS = 5


def _console() -> Console:
    return Console()


def _table(title: str, columns: list[str], left: set[str]) -> Table:
    """A table whose cells wrap instead of being cut with an ellipsis (keys must stay readable)."""
    table = Table(title=escape(title))
    for col in columns:
        table.add_column(col, justify="left" if col in left else "right", overflow="fold")
    return table


def _open(ctx: click.Context) -> GraphStore:
    """Open the configured store and make sure the seed is in it (every memory command does)."""
    from htam_graph.store import open_store

    settings: Settings = ctx.obj
    store = open_store(settings)
    try:
        memory.ensure_seeded(store)
        memory.repair_pending(store)  # finish what a killed writer left half-recorded (no-op otherwise)
    except BaseException:
        store.close()
        raise
    return store


@click.group("memory")
def memory_group() -> None:
    """The HTG memory: directions, strategies, transitions and the evidence behind them."""


@memory_group.command("seed")
@click.option(
    "--file",
    "seed_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Seed YAML to apply (default: the packaged htam_graph/data/seed_memory.yaml).",
)
@click.pass_context
def seed_cmd(ctx: click.Context, seed_file: Path | None) -> None:
    """MERGE the seed memory into the graph (idempotent; recorded evidence is kept)."""
    from htam_graph.seed import load_seed
    from htam_graph.store import store_session

    seed = load_seed(seed_file)  # a malformed file fails here, before the store is touched
    with store_session(ctx.obj) as store:
        counts = memory.seed_memory(store, seed)
    click.echo(
        f"seeded memory v{counts.version}: {counts.globals} directions, {counts.locals} strategies, "
        f"{counts.transitions} prior transitions"
    )


@memory_group.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option(
    "--top", default=10, show_default=True, type=click.IntRange(1, 1000), help="Transitions listed."
)
@click.pass_context
def show_cmd(ctx: click.Context, as_json: bool, top: int) -> None:
    """Counts per label and relationship type, and the strongest observed transitions."""
    store = _open(ctx)
    try:
        summary = memory.memory_summary(store, top=top)
    finally:
        store.close()
    if as_json:
        click.echo(summary.model_dump_json(indent=2))
        return
    console = _console()
    counts = _table("memory", ["kind", "name", "count"], {"kind", "name"})
    for label, n in summary.labels.items():
        counts.add_row("node", label, str(n))
    for rel, n in summary.relationships.items():
        counts.add_row("relationship", rel, str(n))
    console.print(counts)
    if not summary.top_transitions:
        console.print("no observed transitions yet (only seed priors)")
        return
    table = _table(
        "strongest transitions",
        ["from", "to", "gpu", "count", "successes", "mean gain", "compile fails"],
        {"from", "to", "gpu"},
    )
    for t in summary.top_transitions:
        table.add_row(
            t.src,
            t.dst,
            t.gpu_arch,
            str(t.count),
            str(t.successes),
            f"{t.mean_gain:+.4f}",
            str(t.compile_failures),
        )
    console.print(table)


@memory_group.command("suggest")
@click.option("--history", default="", help="Directions taken so far, oldest first, comma-separated.")
@click.option(
    "--gpu-arch", default="sm_90", show_default=True, help="GPU architecture whose evidence weighs most."
)
@click.option("--policy", "mode", type=click.Choice(policy.POLICY_MODES), default="htg", show_default=True)
@click.option(
    "--language", type=click.Choice(["cuda", "triton"]), default=None, help="Only strategies for it."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.pass_context
def suggest_cmd(
    ctx: click.Context, history: str, gpu_arch: str, mode: Any, language: str | None, as_json: bool
) -> None:
    """Rank the next directions after HISTORY, with the top strategies under the best one."""
    settings: Settings = ctx.obj
    keys = [h.strip() for h in history.split(",") if h.strip()]
    store = _open(ctx)
    try:
        scores = memory.score_directions(
            store, keys, gpu_arch=gpu_arch, settings=settings.policy, mode=policy.PolicyMode(mode)
        )
        best = scores[0].key if scores else None
        locals_ = memory.locals_for(store, best, language=language) if best else []
    finally:
        store.close()
    locals_.sort(key=lambda x: (-x.mean_gain, -x.attempts, x.strategy.key))
    top_locals = locals_[:_TOP_LOCALS]
    if as_json:
        click.echo(
            json.dumps(
                {
                    "history": keys,
                    "gpu_arch": gpu_arch,
                    "policy": mode,
                    "directions": [s.model_dump() for s in scores],
                    "best": best,
                    "strategies": [
                        {
                            "key": x.strategy.key,
                            "name": x.strategy.name,
                            "attempts": x.attempts,
                            "positives": x.positives,
                            "negatives": x.negatives,
                            "mean_gain": x.mean_gain,
                            "pattern": x.strategy.pattern,
                        }
                        for x in top_locals
                    ],
                },
                indent=2,
            )
        )
        return
    console = _console()
    path = " -> ".join(keys) if keys else "the start"
    table = _table(
        f"next direction after {path} on {gpu_arch} (policy {mode})",
        ["rank", "direction", "score", "support", "probability"],
        {"direction"},
    )
    for i, s in enumerate(scores, start=1):
        table.add_row(str(i), s.key, f"{s.score:+.4f}", str(s.support), f"{s.probability:.3f}")
    console.print(table)
    strategies = _table(
        f"top strategies under {best}",
        ["strategy", "attempts", "positive", "negative", "mean gain"],
        {"strategy"},
    )
    for x in top_locals:
        strategies.add_row(
            x.strategy.key, str(x.attempts), str(x.positives), str(x.negatives), f"{x.mean_gain:+.4f}"
        )
    console.print(strategies)


@memory_group.command("export")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
def export_cmd(ctx: click.Context, file: Path) -> None:
    """Write the memory bank to FILE (JSON Lines; gzip-compressed when FILE ends in .gz) and
    FILE.manifest.json."""
    store = _open(ctx)
    try:
        manifest = bank.export_bank(store, file)
    finally:
        store.close()
    nodes = sum(manifest.nodes.values())
    rels = sum(manifest.relationships.values())
    click.echo(
        f"exported {nodes} nodes and {rels} relationships to {file} (+ {bank.manifest_path(file).name}), "
        f"sha256 {manifest.sha256[:12]}"
    )


@memory_group.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
def import_cmd(ctx: click.Context, file: Path) -> None:
    """Merge the memory bank FILE (+ FILE.manifest.json; FILE may end in .gz) into the graph; re-importing is
    a no-op."""
    store = _open(ctx)
    try:
        counts = bank.import_bank(store, file)
    finally:
        store.close()
    click.echo(
        f"imported {file}: {counts.attempts_new} new attempts, {counts.attempts_known} already known, "
        f"{sum(counts.nodes.values())} nodes merged, {counts.priors} prior transitions"
    )


def _register_extras() -> None:
    # `memory view` (cli/memview.py) and `memory push/pull` (cli/memsync.py) live in their own modules.
    from htam_graph.cli.memsync import pull_cmd, push_cmd
    from htam_graph.cli.memview import view_cmd

    for command in (view_cmd, push_cmd, pull_cmd):
        memory_group.add_command(command)


_register_extras()
