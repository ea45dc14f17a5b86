"""Resolving what a user names on the command line as a task: a task key, a KernelBench file, or a user
file."""

from __future__ import annotations

from pathlib import Path

from htam_graph.errors import TaskError
from htam_graph.importers.formats import robust_kbench_root
from htam_graph.importers.kernelbench import SkipReason, parse_task
from htam_graph.importers.robust_kbench import scan as scan_robust_kbench
from htam_graph.importers.tasks_store import get_task, record_tasks
from htam_graph.model import Task
from htam_graph.ports import GraphStore


def resolve_task(store: GraphStore | None, spec: str) -> Task:
    """A Robust-KBench task folder is imported (see `importers.robust_kbench`); a path to a `.py` file is
    parsed (and recorded in the graph when a store is given); anything else is a task key looked up in the
    graph. Raises TaskError with one line when neither works."""
    path = Path(spec)
    root = robust_kbench_root(path) if path.exists() else None
    if root is not None:
        found = scan_robust_kbench(root)
        if len(found.tasks) != 1:
            raise TaskError(f"{spec} holds {len(found.tasks)} Robust-KBench tasks; name one task folder")
        if store is not None:
            record_tasks(store, found.tasks)
        return found.tasks[0]
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
