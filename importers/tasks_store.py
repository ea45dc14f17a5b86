"""Writes imported tasks to the graph as (:Task) nodes and reads them back.

One logical write = one `UNWIND $rows` statement per batch (`task_upsert`). Before writing, the stored
properties are read (`task_get`) so that the counts are honest: a key not stored yet is *created*, a stored
task whose properties differ (new source hash, new op tags, moved file) is *updated*, an identical one is
*unchanged* and not written again (its `imported_ms` stays the time of the import that last changed it).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from htam_graph.errors import TaskError
from htam_graph.model import Task
from htam_graph.ports import GraphStore

__all__ = ["ImportCounts", "TaskSummary", "record_tasks", "list_tasks", "get_task", "BATCH_SIZE"]

BATCH_SIZE = 100
_COMPARED = ("suite", "level", "name", "source", "source_sha256", "op_tags", "path")


@dataclass(frozen=True)
class ImportCounts:
    """What `record_tasks` did."""

    created: int = 0
    updated: int = 0
    unchanged: int = 0


class TaskSummary(BaseModel):
    """One imported task without its source (what `tasks list` shows)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    suite: str
    level: int | None
    name: str
    source_sha256: str
    op_tags: list[str]
    path: str | None = None
    imported_ms: int | None = None


def _props(task: Task, now_ms: int) -> dict[str, Any]:
    return {
        "suite": task.suite,
        "level": task.level,
        "name": task.name,
        "source": task.source,
        "source_sha256": task.source_sha256,
        "op_tags": sorted(set(task.op_tags)),
        "path": task.path,
        "imported_ms": now_ms,
    }


def _stored(store: GraphStore, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for start in range(0, len(keys), BATCH_SIZE):
        for row in store.run("task_get", {"keys": list(keys[start : start + BATCH_SIZE])}):
            rows[row["key"]] = row
    return rows


def _same(stored: dict[str, Any], props: dict[str, Any]) -> bool:
    def norm(name: str, value: Any) -> Any:
        return sorted(value or []) if name == "op_tags" else value

    return all(norm(n, stored.get(n)) == norm(n, props[n]) for n in _COMPARED)


def record_tasks(store: GraphStore, tasks: Sequence[Task], now_ms: int | None = None) -> ImportCounts:
    """MERGE the tasks on key; return how many were created, updated and left unchanged.

    Raises TaskError when two tasks share a key (the batch would keep only one of them silently).
    """
    by_key: dict[str, Task] = {}
    for task in tasks:
        if task.key in by_key:
            raise TaskError(f"two tasks with the key {task.key} in one import")
        by_key[task.key] = task
    now = int(time.time() * 1000) if now_ms is None else now_ms
    stored = _stored(store, list(by_key))
    rows: list[dict[str, Any]] = []
    created = updated = unchanged = 0
    for key, task in by_key.items():
        props = _props(task, now)
        if key not in stored:
            created += 1
        elif _same(stored[key], props):
            unchanged += 1
            continue
        else:
            updated += 1
        rows.append({"key": key, "props": props})
    for start in range(0, len(rows), BATCH_SIZE):
        store.run("task_upsert", {"rows": rows[start : start + BATCH_SIZE]})
    return ImportCounts(created, updated, unchanged)


def _summary(row: dict[str, Any]) -> TaskSummary:
    level = row.get("level")
    imported = row.get("imported_ms")
    return TaskSummary(
        key=row["key"],
        suite=row["suite"],
        level=None if level is None else int(level),
        name=row["name"],
        source_sha256=row["source_sha256"],
        op_tags=sorted(row.get("op_tags") or []),
        path=row.get("path"),
        imported_ms=None if imported is None else int(imported),
    )


def list_tasks(store: GraphStore, level: int | None = None) -> list[TaskSummary]:
    """Imported tasks ordered by key, all levels or one."""
    return [_summary(row) for row in store.run("task_list", {"level": level})]


def get_task(store: GraphStore, key: str) -> Task:
    """The imported task with `key`; raises TaskError when the graph holds no such imported task."""
    rows = store.run("task_get", {"keys": [key]})
    if not rows:
        raise TaskError(f"unknown task {key!r} (import it with: htam-graph tasks import PATH)")
    row = rows[0]
    level = row.get("level")
    return Task(
        key=row["key"],
        suite=row["suite"],
        level=None if level is None else int(level),
        name=row["name"],
        source=row["source"],
        source_sha256=row["source_sha256"],
        op_tags=sorted(row.get("op_tags") or []),
        path=row.get("path"),
    )
