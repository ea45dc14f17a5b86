"""Writing a graph's memory bank: sorted JSON Lines (maybe gzip) plus its manifest, written atomically."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import logging
import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from htam_graph import __version__, memory
from htam_graph.bank.format import (
    FORMAT_VERSION,
    LABELS,
    PAGE_SIZE,
    REL_TYPES,
    Manifest,
    is_gzip,
    manifest_path,
    schema_version,
)
from htam_graph.ports import GraphStore

log = logging.getLogger(__name__)

__all__ = ["export_bank"]


def export_bank(store: GraphStore, path: Path) -> Manifest:
    """Write the memory bank to `path` (jsonl) and `path.manifest.json`; return the manifest.

    Files are written to temporaries and renamed, so a failed export never leaves a half file under `path`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    memory.repair_pending(store)  # never export the half-applied stats of an interrupted recording
    nodes: Counter[str] = Counter()
    rels: Counter[str] = Counter()
    digest = hashlib.sha256()
    lines = 0
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    rel_fd, rel_tmp = tempfile.mkstemp(prefix=f".{path.name}.rels.", dir=path.parent)
    try:
        with (
            os.fdopen(fd, "wb") as raw_out,
            os.fdopen(rel_fd, "w+b") as rel_out,
            _writer(path, raw_out) as out,
        ):
            for label in LABELS:
                for row in _pages(store, label):
                    line = _node_line(label, row)
                    out.write(line)
                    digest.update(line)
                    nodes[label] += 1
                    lines += 1
                    for rel in sorted(row["rels"], key=_rel_sort_key):
                        if rel["type"] in REL_TYPES:
                            rel_out.write(_rel_line(label, row["key"], rel))
                            rels[rel["type"]] += 1
            rel_out.seek(0)
            for line in rel_out:  # relationships after every node, as APOC writes them
                out.write(line)
                digest.update(line)
                lines += 1
        manifest = Manifest(
            format_version=FORMAT_VERSION,
            schema_version=schema_version(store),
            tool_version=__version__,
            created_ms=memory.now_ms(),
            jsonl=path.name,
            sha256=digest.hexdigest(),
            lines=lines,
            nodes=dict(sorted(nodes.items())),
            relationships=dict(sorted(rels.items())),
        )
        os.replace(tmp_name, path)
        manifest_path(path).write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    finally:
        for name in (tmp_name, rel_tmp):
            if os.path.exists(name):
                os.unlink(name)
    log.info("exported %d lines to %s", lines, path)
    return manifest


def _writer(path: Path, raw: Any) -> Any:
    """`raw` itself, or a gzip stream over it when `path` ends in .gz (no file name or mtime in the
    header)."""
    if is_gzip(path):
        return gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)
    return contextlib.nullcontext(raw)


def _pages(store: GraphStore, label: str) -> Iterator[dict[str, Any]]:
    after = ""
    while True:
        rows = store.run(f"bank_export_{label.lower()}", {"after": after, "limit": PAGE_SIZE})
        yield from rows
        if len(rows) < PAGE_SIZE:
            return
        after = rows[-1]["key"]


def _rel_sort_key(rel: dict[str, Any]) -> tuple[str, str, str]:
    return (rel["type"], str(rel["end_key"]), str(rel["properties"].get("gpu_arch", "")))


def _dumps(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def _node_line(label: str, row: dict[str, Any]) -> bytes:
    return _dumps(
        {"type": "node", "id": f"{label}:{row['key']}", "labels": [label], "properties": row["properties"]}
    )


def _rel_line(label: str, key: str, rel: dict[str, Any]) -> bytes:
    end_label = rel["end_labels"][0]
    return _dumps(
        {
            "type": "relationship",
            "label": rel["type"],
            "properties": rel["properties"],
            "start": {"id": f"{label}:{key}", "labels": [label], "properties": {"key": key}},
            "end": {
                "id": f"{end_label}:{rel['end_key']}",
                "labels": [end_label],
                "properties": {"key": rel["end_key"]},
            },
        }
    )
