"""Reading and validating a bank file completely, before anything is written: manifest, sha256, counts,
line shapes, references between entities, and every record against its model."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from htam_graph import memory
from htam_graph.bank.format import (
    FORMAT_VERSION,
    GLOBAL_STATS,
    LABELS,
    LOCAL_STATS,
    REL_TYPES,
    Manifest,
    manifest_path,
    read_bank_bytes,
    without,
)
from htam_graph.errors import BankFormatError
from htam_graph.model import AttemptRecord, GlobalDirection, LocalStrategy

__all__ = ["BankPlan", "read_manifest", "read_plan"]

# written by record_attempts, not AttemptRecord fields (the pending markers only on an interrupted recording)
_ATTEMPT_DERIVED = ("positive", "write_token", *memory.PENDING_STEPS)


@dataclass(frozen=True)
class BankPlan:
    """A validated bank, ready to write."""

    nodes: dict[str, dict[str, dict[str, Any]]]  # label -> key -> properties
    priors: list[dict[str, Any]]
    attempts: list[AttemptRecord]


def read_manifest(path: Path) -> Manifest:
    """The manifest beside `path`; BankFormatError when missing, unreadable, invalid or of a newer format."""
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


def read_plan(path: Path, manifest: Manifest) -> BankPlan:
    """Every line of the bank checked against the manifest and the models; BankFormatError at the first
    problem, with its line number."""
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
    return BankPlan(nodes=nodes, priors=priors, attempts=attempts)


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
        _validate(path, "global", key, GlobalDirection, without(props, GLOBAL_STATS))
    for key, props in nodes.get("Local", {}).items():
        _validate(path, "local", key, LocalStrategy, without(props, LOCAL_STATS))
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
