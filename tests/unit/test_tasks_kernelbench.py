"""Static import of KernelBench-form task files: discovery, keys, hashes and skip reasons."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from htam_graph.errors import TaskError
from htam_graph.importers.kernelbench import SkipReason, discover, parse_task, scan
from htam_graph.model import Task

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"

GOOD = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)

batch_size = 16
dim = 1024

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_discover_finds_level_files_in_the_real_kernelbench_layout(tmp_path: Path) -> None:
    repo = tmp_path / "KernelBench"
    _write(repo / "KernelBench" / "level1" / "19_ReLU.py", GOOD)
    _write(repo / "KernelBench" / "level1" / "2_Matmul.py", GOOD)
    _write(repo / "KernelBench" / "level2" / "1_Conv.py", GOOD)
    _write(repo / "KernelBench" / "level1" / "helpers.py", GOOD)  # not N_Name
    _write(repo / "scripts" / "run.py", GOOD)  # not in a level folder
    found = discover(repo)
    assert [p.relative_to(repo).as_posix() for p in found] == [
        "KernelBench/level1/2_Matmul.py",
        "KernelBench/level1/19_ReLU.py",
        "KernelBench/level2/1_Conv.py",
    ]


def test_keys_use_the_checkout_folder_as_suite_and_the_level_folder_as_level(tmp_path: Path) -> None:
    repo = tmp_path / "KernelBench"
    file = _write(repo / "KernelBench" / "level1" / "19_ReLU.py", GOOD)
    task = parse_task(file, repo)
    assert isinstance(task, Task)
    assert (task.key, task.suite, task.level, task.name) == (
        "kernelbench/level1/19_ReLU",
        "kernelbench",
        1,
        "19_ReLU",
    )
    assert task.path == "KernelBench/level1/19_ReLU.py"
    assert task.source_sha256 == hashlib.sha256(file.read_bytes()).hexdigest()
    assert task.op_tags == ["activation", "elementwise"]


def test_single_file_outside_a_level_folder_is_a_user_task(tmp_path: Path) -> None:
    file = _write(tmp_path / "my_op.py", GOOD)
    assert discover(file) == [file]
    task = parse_task(file, file)
    assert isinstance(task, Task)
    assert (task.key, task.suite, task.level, task.path) == ("user/my_op", "user", None, "my_op.py")


def test_missing_path_and_non_python_file_raise(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="no such file"):
        discover(tmp_path / "nope")
    with pytest.raises(TaskError, match="not a Python file"):
        discover(_write(tmp_path / "notes.txt", "x"))
    assert discover(tmp_path) == []  # a folder without level files holds no tasks


def test_syntax_error_is_skipped_with_its_line(tmp_path: Path) -> None:
    file = _write(tmp_path / "level1" / "3_Bad.py", "import torch\n\ndef f(:\n    pass\n")
    skip = parse_task(file, tmp_path)
    assert isinstance(skip, SkipReason)
    assert skip.reason.startswith("syntax error at line 3")
    assert skip.path == "level1/3_Bad.py"


@pytest.mark.parametrize(
    ("drop", "missing"),
    [
        ("class Model", "class Model"),
        ("def get_inputs", "function get_inputs"),
        ("def get_init_inputs", "function get_init_inputs"),
    ],
)
def test_missing_required_names_are_skipped(tmp_path: Path, drop: str, missing: str) -> None:
    file = _write(tmp_path / "level1" / "4_Missing.py", GOOD.replace(drop, drop.replace(" ", " Other_")))
    skip = parse_task(file, tmp_path)
    assert isinstance(skip, SkipReason)
    assert skip.reason == f"missing {missing}"


def test_parsing_never_runs_the_file(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    body = GOOD + f"\nopen({str(marker)!r}, 'w').write('x')\nraise SystemExit(3)\n"
    task = parse_task(_write(tmp_path / "level1" / "5_Side.py", body), tmp_path)
    assert isinstance(task, Task)
    assert not marker.exists()


def test_non_utf8_file_is_skipped(tmp_path: Path) -> None:
    file = tmp_path / "level1" / "6_Latin.py"
    file.parent.mkdir(parents=True)
    file.write_bytes(GOOD.encode() + b"\n# caf\xe9\n")
    skip = parse_task(file, tmp_path)
    assert isinstance(skip, SkipReason) and "not UTF-8" in skip.reason


def test_scan_skips_a_second_file_with_the_same_key(tmp_path: Path) -> None:
    _write(tmp_path / "a" / "suite" / "level1" / "1_X.py", GOOD)
    _write(tmp_path / "b" / "suite" / "level1" / "1_X.py", GOOD)
    result = scan(tmp_path)
    assert [t.key for t in result.tasks] == ["suite/level1/1_X"]
    assert len(result.skipped) == 1 and result.skipped[0].reason.startswith("duplicate key suite/level1/1_X")


def test_the_dev_split_imports_completely() -> None:
    result = scan(KB)
    files = sorted(KB.glob("level*/*.py"))
    assert result.skipped == []
    assert len(result.tasks) == len(files) > 0
    keys = {t.key for t in result.tasks}
    assert "kernelbench/level1/20_LeakyReLU" in keys and "kernelbench/level3/28_VisionTransformer" in keys
    assert {t.level for t in result.tasks} == {1, 2, 3}
    assert all(t.op_tags for t in result.tasks), [t.key for t in result.tasks if not t.op_tags]
