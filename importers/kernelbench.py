"""Imports KernelBench-form tasks: a checkout (`level*/N_Name.py` anywhere below a folder) or one `.py` file.

Parsing is static (`ast`): nothing in a task file runs at import time. A file is a task when it defines a
`Model` class and the functions `get_inputs` and `get_init_inputs` at module level.

Keys:
* a file in a `levelN` folder: `<suite>/levelN/<stem>`, where the suite is the name of the folder holding the
  level folders, lower-cased (`/src/KernelBench/KernelBench/level1/19_ReLU.py` →
  `kernelbench/level1/19_ReLU`);
* any other single file: `user/<stem>` (suite `user`, no level).
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from htam_graph.errors import TaskError
from htam_graph.importers.optags import op_tags_of_tree
from htam_graph.model import Task

__all__ = ["SkipReason", "ScanResult", "discover", "parse_task", "scan", "REQUIRED_NAMES"]

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")
_LEVEL_DIR = re.compile(r"^level(\d+)$")
_TASK_STEM = re.compile(r"^\d+_\w+$")
_SUITE_CHARS = re.compile(r"[^a-z0-9._-]+")


@dataclass(frozen=True)
class SkipReason:
    """A file that is not imported, and why (one line)."""

    path: str
    reason: str


@dataclass(frozen=True)
class ScanResult:
    """What `scan` found: the parsed tasks (in discovery order) and the skipped files."""

    tasks: list[Task]
    skipped: list[SkipReason]


def _is_level_task(path: Path) -> bool:
    return bool(_LEVEL_DIR.match(path.parent.name)) and bool(_TASK_STEM.match(path.stem))


def _sort_key(path: Path) -> tuple[str, int, int, str]:
    level = _LEVEL_DIR.match(path.parent.name)
    number = path.stem.split("_", 1)[0]
    return (
        str(path.parent.parent),
        int(level.group(1)) if level else -1,
        int(number) if number.isdigit() else -1,
        path.name,
    )


def discover(path: Path) -> list[Path]:
    """Task files under `path`: every `levelN/<number>_<Name>.py` below a folder, or the file itself.

    Raises TaskError when `path` does not exist or is neither a folder nor a `.py` file.
    """
    if not path.exists():
        raise TaskError(f"no such file or folder: {path}")
    if path.is_file():
        if path.suffix != ".py":
            raise TaskError(f"not a Python file: {path}")
        return [path]
    if not path.is_dir():
        raise TaskError(f"not a file or folder: {path}")
    found = [
        p
        for p in path.rglob("*.py")
        if p.is_file()
        and _is_level_task(p)
        and not any(part.startswith(".") for part in p.relative_to(path).parts)
    ]
    return sorted(found, key=_sort_key)


def _suite_of(level_dir: Path) -> str:
    suite = _SUITE_CHARS.sub("-", level_dir.parent.name.lower()).strip("-")
    return suite or "kernelbench"


def _identity(path: Path) -> tuple[str, str, int | None]:
    """(key, suite, level) of a task file (see the module docstring)."""
    match = _LEVEL_DIR.match(path.parent.name)
    if match:
        suite = _suite_of(path.parent)
        return f"{suite}/{path.parent.name}/{path.stem}", suite, int(match.group(1))
    return f"user/{path.stem}", "user", None


def _missing_names(tree: ast.Module) -> list[str]:
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    missing = [] if "Model" in classes else ["class Model"]
    missing += [f"function {n}" for n in REQUIRED_NAMES[1:] if n not in functions]
    return missing


def _display_path(path: Path, root: Path | None) -> str:
    if root is not None:
        base = root if root.is_dir() else root.parent
        try:
            return path.resolve().relative_to(base.resolve()).as_posix()
        except ValueError:
            pass
    return path.name


def parse_task(path: Path, root: Path | None = None) -> Task | SkipReason:
    """Parse one task file statically; return a `Task`, or a `SkipReason` saying why it is not one.

    `root` is the folder (or file) the import started from; the task's `path` is stored relative to it.
    """
    shown = _display_path(path, root)
    try:
        raw = path.read_bytes()
        source = raw.decode("utf-8")
    except OSError as e:
        return SkipReason(shown, f"cannot read: {e.strerror or e}")
    except UnicodeDecodeError as e:
        return SkipReason(shown, f"not UTF-8 text (byte {e.start})")
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as e:
        return SkipReason(shown, f"syntax error at line {e.lineno}: {e.msg}")
    missing = _missing_names(tree)
    if missing:
        return SkipReason(shown, "missing " + ", ".join(missing))
    key, suite, level = _identity(path)
    return Task(
        key=key,
        suite=suite,
        level=level,
        name=path.stem,
        source=source,
        source_sha256=hashlib.sha256(raw).hexdigest(),
        op_tags=op_tags_of_tree(tree),
        path=shown,
    )


def scan(path: Path) -> ScanResult:
    """Discover and parse every task under `path`; a second file with an already-seen key is skipped."""
    tasks: list[Task] = []
    skipped: list[SkipReason] = []
    seen: dict[str, str] = {}
    for file in discover(path):
        parsed = parse_task(file, path)
        if isinstance(parsed, SkipReason):
            skipped.append(parsed)
        elif parsed.key in seen:
            skipped.append(
                SkipReason(parsed.path or file.name, f"duplicate key {parsed.key} (also {seen[parsed.key]})")
            )
        else:
            seen[parsed.key] = parsed.path or file.name
            tasks.append(parsed)
    return ScanResult(tasks, skipped)
