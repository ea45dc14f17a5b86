"""Repairs of a graph left incomplete: attempts a killed writer left pending, and CPU attempts counted as
evidence by a writer without that rule. Both are idempotent and run where no other writer is live (the start
of `run` and `bench`, a `memory` command, a bank export or import)."""

from __future__ import annotations

import logging
from typing import Any

from htam_graph.memory.common import BATCH_SIZE
from htam_graph.memory.recording import apply_steps
from htam_graph.model import AttemptRecord
from htam_graph.ports import GraphStore

__all__ = ["repair_cpu_evidence", "repair_pending"]

log = logging.getLogger(__name__)


def repair_pending(store: GraphStore, batch_size: int = BATCH_SIZE) -> int:
    """Complete the recording steps a killed writer left undone (attempts still carrying a pending marker)
    from their stored properties; returns how many attempts were pending. Idempotent: a second call finds
    nothing. First moves out any CPU evidence a writer without that rule counted (`repair_cpu_evidence`).

    Run it only where no other writer of the graph is live (see `Recorder`): a live writer's attempts are
    pending too, and re-applying them concurrently can count them twice on FalkorDB."""
    repair_cpu_evidence(store)
    repaired = 0
    after = ""
    while True:
        rows = store.run("attempt_pending", {"after": after, "limit": batch_size})
        if not rows:
            break
        records = [_stored_record(r["key"], r["props"]) for r in rows]
        apply_steps(store, records)
        repaired += len(records)
        after = rows[-1]["key"]
        if len(rows) < batch_size:
            break
    if repaired:
        log.warning("completed the recording of %d attempt(s) an interrupted writer left pending", repaired)
    return repaired


def repair_cpu_evidence(store: GraphStore) -> int:
    """Move out of the statistics what CPU attempts added under a writer that counted them as evidence (their
    STATS_ON / EVIDENCE_ON edges to the Gpu 'cpu' are subtracted from the node totals and deleted, their
    TRANSITION edges deleted) and clear the statistics markers of CPU attempts left pending. Each statement
    is atomic and leaves nothing for a second run to find, so an interrupted repair is finished by the next
    one. Returns the number of edges and attempts repaired (0 on a graph that never counted a CPU attempt)."""
    repaired = 0
    for name in (
        "repair_cpu_pending",
        "repair_cpu_global_stats",
        "repair_cpu_local_evidence",
        "repair_cpu_transitions",
    ):
        row = store.run(name)
        repaired += int(next(iter(row[0].values()))) if row else 0
    if repaired:
        log.warning("moved CPU attempts out of the evidence (%d edges or attempts repaired)", repaired)
    return repaired


def _stored_record(key: str, props: dict[str, Any]) -> AttemptRecord:
    """The AttemptRecord an Attempt node was written from (without its kernel source, which lives on the
    Kernel node attempt_merge created; `kernel_sha256` names it)."""
    fields = {k: v for k, v in props.items() if k in AttemptRecord.model_fields and k != "key"}
    return AttemptRecord(key=key, **fields)
