"""Resolving what a user names on the command line as a task: a task key, a KernelBench file, or a user file."""

from __future__ import annotations

from pathlib import Path

from htam_graph.errors import TaskError
from htam_graph.importers.kernelbench import SkipReason, parse_task
from htam_graph.importers.tasks_store import get_task, record_tasks
from htam_graph.model import Task
from htam_graph.ports import GraphStore


def resolve_task(store: GraphStore | None, spec: str) -> Task:
    """A path to a `.py` file is parsed (and recorded in the graph when a store is given); anything else is a
    task key looked up in the graph. Raises TaskError with one line when neither works."""
    path = Path(spec)
    if path.suffix == ".py" or path.exists():
        if not path.is_file():
            raise TaskError(f"task file not found: {spec}")
        parsed = parse_task(path.resolve())
        if isinstance(parsed, SkipReason):
            raise TaskError(f"not a KernelBench-form task: {spec}: {parsed.reason}")
        if store is not None:
            record_tasks(store, [parsed])
        return parsed
    if store is None:
        raise TaskError(f"{spec!r} is not a file; task keys need the graph (import tasks first)")
    return get_task(store, spec)
