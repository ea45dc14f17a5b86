"""File-system layout shared by the evaluator (parent, no torch) and the worker."""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["source_digest", "extension_dir"]


def source_digest(source: str) -> str:
    """The first 16 hex digits of the source's sha256 (the cache key of one candidate)."""
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def extension_dir(root: str | Path, source: str) -> str:
    """The TORCH_EXTENSIONS_DIR of one candidate source: re-evaluations are warm, different sources never share a
    build directory or its lock file."""
    return str(Path(root) / source_digest(source))
