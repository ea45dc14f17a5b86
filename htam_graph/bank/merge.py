"""Merging a validated bank into a graph: static nodes on key, seed priors, then the attempts replayed."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from htam_graph import memory
from htam_graph.bank.format import GLOBAL_STATS, LOCAL_STATS, ImportCounts, schema_version, without
from htam_graph.bank.validate import BankPlan, read_manifest, read_plan
from htam_graph.errors import BankFormatError
from htam_graph.ports import GraphStore

log = logging.getLogger(__name__)

__all__ = ["import_bank"]


def import_bank(store: GraphStore, path: Path) -> ImportCounts:
    """Validate the bank at `path` (jsonl + manifest) completely, then merge it into the store.

    Raises BankFormatError (one line, nothing written) for a missing/corrupt manifest, a sha256 or count
    mismatch, a truncated or malformed line, a dangling reference, or a newer format or schema version.
    """
    path = Path(path)
    manifest = read_manifest(path)
    plan = read_plan(path, manifest)
    store_schema = schema_version(store)
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


def _write_static(store: GraphStore, plan: BankPlan) -> None:
    def rows(label: str, drop: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        return [
            {"key": k, "props": without(p, ("key", *drop))}
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
