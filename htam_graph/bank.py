"""Memory-bank export and import: share what one graph learned with another (embedded FalkorDB or Neo4j).

Format (version 1), for `export_bank(store, "bank.jsonl")`:
- `bank.jsonl`: JSON Lines in the shape of APOC's `apoc.export.json.all`, all nodes first, then all
  relationships. A node is `{"type": "node", "id": "<Label>:<key>", "labels": [...], "properties": {...}}`; a
  relationship is `{"type": "relationship", "label": TYPE, "properties": {...}, "start": {"id", "labels",
  "properties": {"key"}}, "end": {...}}`. Identity is the application key, never an engine's internal id.
  Lines are sorted (label order, then key), so one graph always exports the same bytes up to `created_ms`.
- `bank.jsonl.manifest.json`: format version, graph schema version, counts per label and relationship type,
  line count, sha256 of the jsonl, producing tool and version, created_ms.
- A path ending in `.gz` (`bank.jsonl.gz`, manifest `bank.jsonl.gz.manifest.json`) is the same jsonl
  gzip-compressed (deterministic: no name or time in the gzip header). The manifest's sha256 and line count
  are of the uncompressed lines, so a bank has the same sha256 compressed or not.

Import validates the whole file against the manifest before writing anything (one `BankFormatError` line on
any problem), then MERGEs the static nodes on key (existing properties win), the seed's prior transitions
(counts untouched), and replays the attempts through `memory.record_attempts`, which applies stat increments
for attempts the graph did not hold. So import -> re-import is a no-op and two banks merge by adding their
counts and sums. Stat properties in the file (totals, STATS_ON, EVIDENCE_ON, evidence TRANSITION edges) are
derived data: they are exported for reading but rebuilt from the attempts on import.

CPU attempts (Triton interpreted) are not evidence (`memory.is_evidence`): a bank written by a version that
counted them imports with their contributions left out (its attempts are replayed under today's rule), and the
import also moves out whatever CPU contributions the receiving graph itself still holds
(`memory.repair_cpu_evidence`).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import logging
import os
import tempfile
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from htam_graph import __version__, memory
from htam_graph.errors import BankFormatError
from htam_graph.model import AttemptRecord, GlobalDirection, LocalStrategy
from htam_graph.ports import GraphStore

log = logging.getLogger(__name__)

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
# written by record_attempts, not AttemptRecord fields (the pending markers only on an interrupted recording)
_ATTEMPT_DERIVED = ("positive", "write_token", *memory.PENDING_STEPS)


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


# ------------------------------------------------------------------------------------------------ export
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
            schema_version=_schema_version(store),
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


def _is_gzip(path: Path) -> bool:
    return path.name.endswith(".gz")


def _writer(path: Path, raw: Any) -> Any:
    """`raw` itself, or a gzip stream over it when `path` ends in .gz (no file name or mtime in the
    header)."""
    if _is_gzip(path):
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


def _schema_version(store: GraphStore) -> int | None:
    rows = store.run("schema_version_get")
    return int(rows[0]["version"]) if rows else None


# ------------------------------------------------------------------------------------------------ import
@dataclass(frozen=True)
class _Plan:
    """A validated bank, ready to write."""

    nodes: dict[str, dict[str, dict[str, Any]]]  # label -> key -> properties
    priors: list[dict[str, Any]]
    attempts: list[AttemptRecord]


def import_bank(store: GraphStore, path: Path) -> ImportCounts:
    """Validate the bank at `path` (jsonl + manifest) completely, then merge it into the store.

    Raises BankFormatError (one line, nothing written) for a missing/corrupt manifest, a sha256 or count
    mismatch, a truncated or malformed line, a dangling reference, or a newer format or schema version.
    """
    path = Path(path)
    manifest = _read_manifest(path)
    plan = _read_plan(path, manifest)
    store_schema = _schema_version(store)
    if (
        manifest.schema_version is not None
        and store_schema is not None
        and manifest.schema_version > store_schema
    ):
        raise BankFormatError(
            f"{path}: bank schema version {manifest.schema_version} is newer than "
            f"this graph's {store_schema}; upgrade htam-graph"
        )
    memory.check_keys(  # attempts may name globals/locals the file lacks but the graph holds
        store,
        globals_=sorted({a.global_key for a in plan.attempts} - set(plan.nodes.get("Global", {}))),
        locals_=sorted(
            {a.local_key for a in plan.attempts if a.local_key} - set(plan.nodes.get("Local", {}))
        ),
    )
    _write_static(store, plan)
    new = memory.record_attempts(store, plan.attempts)
    memory.repair_cpu_evidence(store)  # the receiving graph may hold CPU attempts counted as evidence
    follows = [
        {"key": a.key, "prev_attempt_key": a.prev_attempt_key} for a in plan.attempts if a.prev_attempt_key
    ]
    for start in range(0, len(follows), memory.BATCH_SIZE):
        store.run("attempt_follows", {"rows": follows[start : start + memory.BATCH_SIZE]})
    counts = ImportCounts(
        nodes={k: len(v) for k, v in plan.nodes.items()},
        priors=len(plan.priors),
        attempts_new=new,
        attempts_known=len(plan.attempts) - new,
    )
    log.info("imported %s: %s", path, counts)
    return counts


def _read_manifest(path: Path) -> Manifest:
    mpath = manifest_path(path)
    try:
        raw = json.loads(mpath.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise BankFormatError(f"{mpath}: manifest not found (a bank is FILE plus FILE.manifest.json)") from e
    except (OSError, ValueError) as e:
        raise BankFormatError(f"{mpath}: unreadable manifest: {e}") from e
    if not isinstance(raw, dict):
        raise BankFormatError(f"{mpath}: manifest is not a JSON object")
    version = raw.get("format_version")
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise BankFormatError(
            f"{mpath}: bank format version {version} is newer than this htam-graph reads ({FORMAT_VERSION})"
        )
    try:
        manifest = Manifest(**raw)
    except ValidationError as e:
        first = e.errors()[0]
        raise BankFormatError(
            f"{mpath}: invalid manifest field {'.'.join(map(str, first['loc']))}: {first['msg']}"
        ) from e
    if manifest.format_version < 1:
        raise BankFormatError(f"{mpath}: invalid format version {manifest.format_version}")
    return manifest


def read_bank_bytes(path: Path) -> bytes:
    """The bank's JSON Lines bytes, decompressed when `path` ends in .gz; BankFormatError (one line) when the
    file cannot be read or its gzip data is corrupt."""
    try:
        data = path.read_bytes()
        return gzip.decompress(data) if _is_gzip(path) else data
    except OSError as e:  # gzip.BadGzipFile is an OSError
        raise BankFormatError(f"{path}: cannot read the bank: {e}") from e
    except (EOFError, zlib.error) as e:
        raise BankFormatError(f"{path}: truncated or corrupt gzip data: {e}") from e


def _read_plan(path: Path, manifest: Manifest) -> _Plan:
    data = read_bank_bytes(path)
    if hashlib.sha256(data).hexdigest() != manifest.sha256:
        raise BankFormatError(f"{path}: sha256 does not match the manifest (corrupt, truncated or edited)")
    nodes: dict[str, dict[str, dict[str, Any]]] = {}
    rels: list[tuple[int, dict[str, Any]]] = []
    node_counts: Counter[str] = Counter()
    rel_counts: Counter[str] = Counter()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for n, line in enumerate(lines, start=1):
        obj = _parse_line(path, n, line)
        if obj["type"] == "node":
            label, key, props = _node_fields(path, n, obj)
            if key in nodes.setdefault(label, {}):
                raise BankFormatError(f"{path}:{n}: duplicate {label} key {key!r}")
            nodes[label][key] = props
            node_counts[label] += 1
        else:
            rels.append((n, obj))
            rel_counts[str(obj.get("label"))] += 1
    if (
        len(lines) != manifest.lines
        or dict(node_counts) != manifest.nodes
        or dict(rel_counts) != manifest.relationships
    ):
        raise BankFormatError(f"{path}: line or entity counts differ from the manifest")
    priors = [_prior_row(path, n, obj, nodes) for n, obj in rels if _is_prior(obj)]
    for n, obj in rels:
        _check_ends(path, n, obj, nodes)
    attempts = _attempt_records(path, nodes)
    return _Plan(nodes=nodes, priors=priors, attempts=attempts)


def _parse_line(path: Path, n: int, line: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise BankFormatError(f"{path}:{n}: not valid JSON (truncated or corrupt line)") from e
    if not isinstance(obj, dict) or obj.get("type") not in {"node", "relationship"}:
        raise BankFormatError(f"{path}:{n}: expected an object of type 'node' or 'relationship'")
    if obj["type"] == "relationship" and obj.get("label") not in REL_TYPES:
        raise BankFormatError(f"{path}:{n}: unknown relationship type {obj.get('label')!r}")
    return obj


def _node_fields(path: Path, n: int, obj: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    labels, props = obj.get("labels"), obj.get("properties")
    if not (
        isinstance(labels, list) and len(labels) == 1 and labels[0] in LABELS and isinstance(props, dict)
    ):
        raise BankFormatError(f"{path}:{n}: a node needs one label of {list(LABELS)} and a properties object")
    key = props.get("key")
    if not isinstance(key, str) or not key:
        raise BankFormatError(f"{path}:{n}: {labels[0]} node without a string key")
    return labels[0], key, props


def _end_key(obj: dict[str, Any], side: str) -> tuple[str, str]:
    end = obj.get(side)
    if not isinstance(end, dict) or not isinstance(end.get("labels"), list) or not end["labels"]:
        return "", ""
    key = (end.get("properties") or {}).get("key")
    return str(end["labels"][0]), key if isinstance(key, str) else ""


def _check_ends(path: Path, n: int, obj: dict[str, Any], nodes: dict[str, dict[str, dict[str, Any]]]) -> None:
    for side in ("start", "end"):
        label, key = _end_key(obj, side)
        if key not in nodes.get(label, {}):
            raise BankFormatError(
                f"{path}:{n}: {obj['label']} {side} node {label}:{key!r} is not in the bank"
            )


def _is_prior(obj: dict[str, Any]) -> bool:
    props = obj.get("properties")
    return (
        obj["label"] == "TRANSITION"
        and isinstance(props, dict)
        and props.get("gpu_arch") == memory.PRIOR_ARCH
    )


def _prior_row(
    path: Path, n: int, obj: dict[str, Any], nodes: dict[str, dict[str, dict[str, Any]]]
) -> dict[str, Any]:
    _check_ends(path, n, obj, nodes)
    props = obj["properties"]
    return {
        "src": _end_key(obj, "start")[1],
        "dst": _end_key(obj, "end")[1],
        "rationale": str(props.get("rationale") or ""),
        "risks": list(props.get("risks") or []),
        "applicable_when": list(props.get("applicable_when") or []),
    }


def _attempt_records(path: Path, nodes: dict[str, dict[str, dict[str, Any]]]) -> list[AttemptRecord]:
    kernels = nodes.get("Kernel", {})
    records = []
    for key, props in nodes.get("Attempt", {}).items():
        fields = {k: v for k, v in props.items() if k not in _ATTEMPT_DERIVED}
        sha = fields.get("kernel_sha256")
        if sha is not None:
            if sha not in kernels:
                raise BankFormatError(
                    f"{path}: attempt {key!r} names kernel {sha!r}, which is not in the bank"
                )
            fields["kernel_source"] = kernels[sha].get("source")
        try:
            records.append(AttemptRecord(**fields))
        except ValidationError as e:
            first = e.errors()[0]
            raise BankFormatError(
                f"{path}: attempt {key!r}: invalid field {'.'.join(map(str, first['loc']))}: {first['msg']}"
            ) from e
    for key, props in nodes.get("Global", {}).items():
        _validate(path, "global", key, GlobalDirection, _without(props, GLOBAL_STATS))
    for key, props in nodes.get("Local", {}).items():
        _validate(path, "local", key, LocalStrategy, _without(props, LOCAL_STATS))
    records.sort(key=lambda a: (a.created_ms, a.step, a.key))
    return records


def _validate(path: Path, what: str, key: str, model: type[BaseModel], props: dict[str, Any]) -> None:
    try:
        model(**props)
    except ValidationError as e:
        first = e.errors()[0]
        raise BankFormatError(
            f"{path}: {what} {key!r}: invalid field {'.'.join(map(str, first['loc']))}: {first['msg']}"
        ) from e


def _without(props: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in props.items() if k not in names}


def _write_static(store: GraphStore, plan: _Plan) -> None:
    def rows(label: str, drop: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        return [
            {"key": k, "props": _without(p, ("key", *drop))}
            for k, p in sorted(plan.nodes.get(label, {}).items())
        ]

    store.run("memory_gpu_merge", {"keys": sorted(plan.nodes.get("Gpu", {}))})
    batches: list[tuple[str, list[dict[str, Any]]]] = [
        ("bank_import_globals", rows("Global", GLOBAL_STATS)),
        (
            "bank_import_locals",
            [{**r, "global_key": r["props"].get("global_key")} for r in rows("Local", LOCAL_STATS)],
        ),
        ("bank_import_tasks", rows("Task")),
        ("bank_import_runs", rows("Run")),
        ("bank_import_kernels", rows("Kernel")),
        ("bank_import_priors", plan.priors),
    ]
    for name, all_rows in batches:
        for start in range(0, len(all_rows), memory.BATCH_SIZE):
            store.run(name, {"rows": all_rows[start : start + memory.BATCH_SIZE]})
