"""A worker's small on-disk caches of facts about the trusted REFERENCE (never about a candidate).

Each entry is one JSON file named by a hash of everything the fact depends on, written atomically (a temporary
file renamed), so concurrent workers never read half a file and a lost race only computes the value twice. A
missing, unreadable or invalid entry is computed again. Candidate results are never cached: every candidate is
compiled, checked and timed by its own evaluation.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["cached_json", "entry_path"]

T = TypeVar("T")


def entry_path(directory: str | Path, key_text: str) -> Path:
    """The file of the entry for `key_text` under `directory`."""
    return Path(directory) / f"{hashlib.sha256(key_text.encode()).hexdigest()[:32]}.json"


def cached_json(
    directory: str,
    key_text: str,
    compute: Callable[[], T],
    decode: Callable[[Any], T | None],
) -> T:
    """`compute()`, or the value cached under `key_text` when `decode` accepts the stored JSON (None: rejected).

    The value is stored as `json.dumps(value)` (tuples come back as lists: `decode` rebuilds them). `directory` ""
    turns the cache off. Write errors are ignored (the value is still returned).
    """
    if not directory:
        return compute()
    path = entry_path(directory, key_text)
    with contextlib.suppress(OSError, ValueError):
        found = decode(json.loads(path.read_text(encoding="utf-8")))
        if found is not None:
            return found
    value = compute()
    with contextlib.suppress(OSError, TypeError, ValueError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(value), encoding="utf-8")
        os.replace(tmp, path)  # atomic: concurrent workers never read a half-written file
    return value
