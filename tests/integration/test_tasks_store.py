"""Tasks in the real graph store: MERGE on key, honest created/updated/unchanged counts, list and get."""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.errors import TaskError
from htam_graph.importers.kernelbench import parse_task, scan
from htam_graph.importers.tasks_store import ImportCounts, get_task, list_tasks, record_tasks
from htam_graph.model import Task
from htam_graph.ports import GraphStore

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"

SOURCE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    """Quotes ' " \\\\ and unicode: café ✓ survive the round trip."""
    def forward(self, x):
        return torch.softmax(x, dim=1)

batch_size = 8

def get_inputs():
    return [torch.rand(batch_size, 32)]

def get_init_inputs():
    return []
'''


def _task(tmp_path: Path, rel: str, text: str = SOURCE) -> Task:
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    task = parse_task(path, tmp_path)
    assert isinstance(task, Task)
    return task


def test_import_reimport_and_change(store: GraphStore, tmp_path: Path) -> None:
    one = _task(tmp_path, "kb/level1/1_Softmax.py")
    two = _task(tmp_path, "kb/level2/7_Other.py")
    assert record_tasks(store, [one, two], now_ms=1000) == ImportCounts(created=2)
    assert record_tasks(store, [one, two], now_ms=2000) == ImportCounts(unchanged=2)

    changed = _task(tmp_path, "kb/level1/1_Softmax.py", SOURCE.replace("batch_size = 8", "batch_size = 9"))
    assert changed.source_sha256 != one.source_sha256
    assert record_tasks(store, [changed, two], now_ms=3000) == ImportCounts(updated=1, unchanged=1)

    got = get_task(store, "kb/level1/1_Softmax")
    assert got == changed  # every field, the source byte for byte included
    summaries = {s.key: s for s in list_tasks(store)}
    assert summaries["kb/level1/1_Softmax"].imported_ms == 3000
    assert summaries["kb/level2/7_Other"].imported_ms == 1000  # unchanged tasks are not rewritten
    assert summaries["kb/level1/1_Softmax"].op_tags == ["softmax"]


def test_list_filters_by_level_and_orders_by_key(store: GraphStore, tmp_path: Path) -> None:
    tasks = [_task(tmp_path, f"kb/level{lvl}/{n}_T.py") for lvl, n in [(2, 3), (1, 10), (1, 2)]]
    user = _task(tmp_path, "mine.py", SOURCE.replace("torch.softmax(x, dim=1)", "x"))
    assert user.op_tags == []
    record_tasks(store, [*tasks, user])
    assert [s.key for s in list_tasks(store)] == [
        "kb/level1/10_T",
        "kb/level1/2_T",
        "kb/level2/3_T",
        "user/mine",
    ]
    assert [s.key for s in list_tasks(store, level=1)] == ["kb/level1/10_T", "kb/level1/2_T"]
    assert list_tasks(store, level=3) == []
    mine = get_task(store, "user/mine")
    assert (mine.level, mine.op_tags) == (None, [])
    assert record_tasks(store, [user]) == ImportCounts(
        unchanged=1
    )  # a null level and empty tags compare equal


def test_unknown_key_and_duplicate_keys_raise(store: GraphStore, tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="unknown task 'kb/level1/404_Nope'"):
        get_task(store, "kb/level1/404_Nope")
    task = _task(tmp_path, "kb/level1/1_A.py")
    with pytest.raises(TaskError, match="two tasks with the key"):
        record_tasks(store, [task, task])


def test_the_dev_split_round_trips(store: GraphStore) -> None:
    result = scan(KB)
    counts = record_tasks(store, result.tasks)
    assert counts == ImportCounts(created=len(result.tasks))
    assert record_tasks(store, result.tasks) == ImportCounts(unchanged=len(result.tasks))
    listed = list_tasks(store)
    assert [s.key for s in listed] == sorted(t.key for t in result.tasks)
    assert {s.key: s.source_sha256 for s in listed} == {t.key: t.source_sha256 for t in result.tasks}
    vit = get_task(store, "kernelbench/level3/28_VisionTransformer")
    assert vit.source == (KB / "level3/28_VisionTransformer.py").read_text(encoding="utf-8")
