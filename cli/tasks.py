"""`htam-graph tasks import PATH` and `htam-graph tasks list`: KernelBench-form tasks in the graph."""

from __future__ import annotations

import json
from pathlib import Path

import click

from htam_graph.errors import TaskError
from htam_graph.importers.formats import scan_path
from htam_graph.importers.kernelbench import ScanResult, SkipReason, discover, parse_task
from htam_graph.importers.tasks_store import ImportCounts, TaskSummary, list_tasks, record_tasks
from htam_graph.model import Task
from htam_graph.settings import Settings
from htam_graph.store import store_session

_PROGRESS_MIN_FILES = 20  # a progress bar only when there is something to wait for


@click.group("tasks")
def tasks() -> None:
    """Import and list KernelBench-form tasks (Model, get_inputs, get_init_inputs)."""


def _scan_with_progress(path: Path, quiet: bool) -> ScanResult:
    files = discover(path)
    if not files:
        raise TaskError(
            f"no task files under {path} (expected levelN/<number>_<Name>.py files or one .py file)"
        )
    found: list[Task] = []
    skipped: list[SkipReason] = []
    seen: dict[str, str] = {}

    def take(file: Path) -> None:
        parsed = parse_task(file, path)
        if isinstance(parsed, SkipReason):
            skipped.append(parsed)
        elif parsed.key in seen:
            skipped.append(
                SkipReason(parsed.path or file.name, f"duplicate key {parsed.key} (also {seen[parsed.key]})")
            )
        else:
            seen[parsed.key] = parsed.path or file.name
            found.append(parsed)

    if quiet or len(files) < _PROGRESS_MIN_FILES:
        for file in files:
            take(file)
    else:
        from rich.progress import track

        for file in track(files, description="parsing tasks", transient=True):
            take(file)
    return ScanResult(found, skipped)


@tasks.command("import")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the counts and skips as JSON.")
@click.pass_obj
def import_cmd(settings: Settings, path: Path, as_json: bool) -> None:
    """Import the tasks of a KernelBench checkout (any levelN/N_Name.py below PATH), of one .py file, or of
    Robust-KBench task folders (func_forward.py + config_forward.json, at or below PATH)."""
    scan = scan_path(path, lambda p: _scan_with_progress(p, quiet=as_json))
    counts = ImportCounts()
    if scan.tasks:
        with store_session(settings) as store:
            counts = record_tasks(store, scan.tasks)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "imported": counts.created,
                    "updated": counts.updated,
                    "unchanged": counts.unchanged,
                    "skipped": [{"path": s.path, "reason": s.reason} for s in scan.skipped],
                },
                indent=2,
            )
        )
        return
    click.echo(
        f"imported {counts.created}, updated {counts.updated}, unchanged {counts.unchanged}, "
        f"skipped {len(scan.skipped)}"
    )
    for skip in scan.skipped:
        click.echo(f"  skipped {skip.path}: {skip.reason}")


def _summary_json(task: TaskSummary) -> dict[str, object]:
    data: dict[str, object] = task.model_dump()
    return data


@tasks.command("list")
@click.option("--level", type=int, default=None, help="Only tasks of this KernelBench level.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def list_cmd(settings: Settings, level: int | None, as_json: bool) -> None:
    """List the imported tasks: key, level, op tags, short source hash."""
    with store_session(settings) as store:
        rows = list_tasks(store, level)
    if as_json:
        click.echo(json.dumps([_summary_json(t) for t in rows], indent=2))
        return
    if not rows:
        click.echo("no tasks imported" + (f" at level {level}" if level is not None else ""))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("key", "level", "op tags", "sha256", box=None)
    for task in rows:
        table.add_row(
            task.key,
            "" if task.level is None else str(task.level),
            ", ".join(task.op_tags),
            task.source_sha256[:12],
        )
    Console(width=160).print(table)
