"""Which task format a path holds, and scanning it: Robust-KBench task folders or KernelBench-form files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from htam_graph.importers import kernelbench, robust_kbench
from htam_graph.importers.kernelbench import ScanResult

__all__ = ["robust_kbench_root", "scan_path"]


def robust_kbench_root(path: Path) -> Path | None:
    """The folder to import as Robust-KBench when `path` is one (or its func_forward.py), else None."""
    if path.is_file() and path.name == robust_kbench.FUNC_FILE:
        return path.parent
    return path if robust_kbench.holds_tasks(path) else None


def scan_path(path: Path, kernelbench_scan: Callable[[Path], ScanResult] = kernelbench.scan) -> ScanResult:
    """The tasks under `path`: Robust-KBench task folders, KernelBench-form files, or both when a folder holds
    both. Raises TaskError (one line) for a missing path or a Robust-KBench folder with no valid task."""
    root = robust_kbench_root(path)
    if root is None:
        return kernelbench_scan(path)
    found = robust_kbench.scan(root)
    if root.is_dir() and kernelbench.discover(root):
        other = kernelbench_scan(root)
        return ScanResult(found.tasks + other.tasks, found.skipped + other.skipped)
    return found
