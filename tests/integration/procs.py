"""Find processes by a marker in their environment: the tests that check that no worker outlives a bench or an
evaluation mark their own children this way, so processes that other tests start at the same time
(pytest-xdist workers, the Neo4j run beside them) are never taken for leftovers.

Loaded by path (`load_sibling("procs")`, see sibling_module.py).
"""

from __future__ import annotations

import os
from pathlib import Path


def processes_with_env(marker: str) -> list[int]:
    """Processes (other than this one) whose environment holds `marker`, a whole `NAME=value` entry."""
    needle = marker.encode() + b"\0"
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes() and int(entry.name) != os.getpid():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
