"""The bank's file format: its constants, the manifest, and reading the (maybe gzip) bytes."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from htam_graph.errors import BankFormatError
from htam_graph.ports import GraphStore

__all__ = [
    "FORMAT_VERSION",
    "GLOBAL_STATS",
    "LABELS",
    "LOCAL_STATS",
    "PAGE_SIZE",
    "REL_TYPES",
    "TOOL",
    "ImportCounts",
    "Manifest",
    "is_gzip",
    "manifest_path",
    "read_bank_bytes",
    "schema_version",
    "without",
]

FORMAT_VERSION = 1
TOOL = "htam-graph"
PAGE_SIZE = 1000
# Export order; every relationship starts at a node of one of these labels.
LABELS: tuple[str, ...] = ("Gpu", "Global", "Local", "Task", "Run", "Kernel", "Attempt")
REL_TYPES: frozenset[str] = frozenset(
    {
        "REFINES",
        "TRANSITION",
        "STATS_ON",
        "EVIDENCE_ON",
        "OF",
        "IN_RUN",
        "FOLLOWS",
        "APPLIED",
        "CHOSE",
        "PRODUCED",
    }
)
GLOBAL_STATS = ("attempts", "successes", "gain_sum", "compile_failures")
LOCAL_STATS = ("attempts", "positives", "negatives", "gain_sum")


class Manifest(BaseModel):
    """The manifest written next to a bank's jsonl."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    format_version: int
    schema_version: int | None
    tool: str = TOOL
    tool_version: str = ""
    created_ms: int = 0
    jsonl: str  # file name of the jsonl, relative to the manifest
    sha256: str
    lines: int
    nodes: dict[str, int]
    relationships: dict[str, int]


class ImportCounts(BaseModel):
    """What an import did."""

    model_config = ConfigDict(frozen=True)
    nodes: dict[str, int]  # nodes per label in the file (merged on key)
    priors: int  # seed prior transitions merged
    attempts_new: int  # attempts recorded now (their stats were added)
    attempts_known: int  # attempts the graph already held (skipped)


def manifest_path(path: Path) -> Path:
    """`bank.jsonl` -> `bank.jsonl.manifest.json`."""
    return path.with_name(path.name + ".manifest.json")


def is_gzip(path: Path) -> bool:
    """A path ending in .gz holds the jsonl gzip-compressed."""
    return path.name.endswith(".gz")


def read_bank_bytes(path: Path) -> bytes:
    """The bank's JSON Lines bytes, decompressed when `path` ends in .gz; BankFormatError (one line) when the
    file cannot be read or its gzip data is corrupt."""
    try:
        data = path.read_bytes()
        return gzip.decompress(data) if is_gzip(path) else data
    except OSError as e:  # gzip.BadGzipFile is an OSError
        raise BankFormatError(f"{path}: cannot read the bank: {e}") from e
    except (EOFError, zlib.error) as e:
        raise BankFormatError(f"{path}: truncated or corrupt gzip data: {e}") from e


def schema_version(store: GraphStore) -> int | None:
    """The graph schema version the store records, None when it records none."""
    rows = store.run("schema_version_get")
    return int(rows[0]["version"]) if rows else None


def without(props: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """`props` less the `names` (the derived statistics an import rebuilds)."""
    return {k: v for k, v in props.items() if k not in names}
