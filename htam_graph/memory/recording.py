"""Recording attempt outcomes: the Attempt and Kernel records, their links, and the statistics they add
(global stats, local evidence, transitions), crash-safe through the `GraphStore` port.

Neither engine gives multi-statement transactions through the port, and each statement is atomic on its own.
`attempt_merge` writes every new Attempt with one marker per step still to apply (`pend_link`, `pend_global`,
`pend_local`, `pend_transition`); each later statement keeps only the attempts still marked for its step,
aggregates them per key in Cypher, applies the increments and clears the marker in one statement, so
re-running a step never counts an attempt twice. What an attempt counts for is `evidence.py`'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from htam_graph.errors import UnknownKeyError
from htam_graph.memory.common import BATCH_SIZE, PRIOR_ARCH, arch_of, drop_none, kernel_key, now_ms
from htam_graph.memory.evidence import counted_gain, is_evidence, is_positive
from htam_graph.model import AttemptRecord, RunRecord
from htam_graph.ports import GraphStore

__all__ = [
    "PENDING_STEPS",
    "Recorder",
    "apply_steps",
    "check_keys",
    "record_attempt",
    "record_attempts",
    "record_run",
]

PENDING_STEPS = ("pend_link", "pend_global", "pend_local", "pend_transition")  # markers on an Attempt node


def record_run(store: GraphStore, run: RunRecord) -> None:
    """Write a run's description onto its Run node (attempts link to it by `run_key`)."""
    props = drop_none(run.model_dump(mode="json", exclude={"key"}))
    store.run("memory_run_merge", {"key": run.key, "props": props})


class Recorder:
    """One writer's recording into one store (a run, a bank import).

    It owns the batches it failed to finish: when a statement raises part-way (an exception, not a kill), the
    batch's remaining steps are re-applied at this recorder's next `record_attempts`, before anything new is
    written. Only this writer touches its own attempts, so that never races another writer. Attempts a killed
    process left pending are completed by `repair_pending`, run where no other writer is live: on FalkorDB a
    statement's MATCH/WHERE may read before another writer's commit, so a repair racing a live writer can
    count that writer's attempts twice.
    """

    def __init__(self, store: GraphStore) -> None:
        self.store = store
        self._unfinished: list[AttemptRecord] = []

    def record_attempt(self, record: AttemptRecord) -> bool:
        """Record one attempt; see `record_attempts`. True when it was new (False: already recorded)."""
        return self.record_attempts([record]) == 1

    def record_attempts(self, records: Iterable[AttemptRecord], batch_size: int = BATCH_SIZE) -> int:
        """Record attempts in batches: outcome records, global stats, local evidence and transitions.

        An attempt whose key is already in the graph is skipped entirely (re-recording and re-importing are
        no-ops, also between concurrent writers). Raises UnknownKeyError, before writing anything, when a
        global or local key is not in the memory. Returns the number of attempts newly recorded.
        """
        unique = _dedupe(records)
        if not unique:
            return 0
        stamp = now_ms()  # one creation time for records that carry none, shared by every statement
        unique = [r if r.created_ms else r.model_copy(update={"created_ms": stamp}) for r in unique]
        for r in unique:
            if r.gpu_arch == PRIOR_ARCH:
                raise ValueError(f"attempt {r.key!r}: gpu_arch {PRIOR_ARCH!r} is reserved for seed priors")
        previous = {r.prev_global_key for r in unique if r.prev_global_key}
        missing_gpus = check_keys(
            self.store,
            globals_=sorted({r.global_key for r in unique} | previous),
            locals_=sorted({r.local_key for r in unique if r.local_key}),
            gpus=sorted({arch_of(r) for r in unique}),
        )
        if missing_gpus:
            self.store.run("memory_gpu_merge", {"keys": missing_gpus})
        self._finish_own()  # one of our own earlier batches failed half-way: finish it before adding more
        created = 0
        start = 0
        try:
            for start in range(0, len(unique), batch_size):
                created += _record_batch(self.store, unique[start : start + batch_size])
        except BaseException:
            self._unfinished.extend(unique[start : start + batch_size])
            raise
        return created

    def _finish_own(self) -> None:
        """Re-apply the steps of this writer's own half-applied batches (each step only where still
        pending)."""
        pending, self._unfinished = self._unfinished, []
        if not pending:
            return
        try:
            apply_steps(self.store, pending)
        except BaseException:
            self._unfinished = pending
            raise


def record_attempt(store: GraphStore, record: AttemptRecord) -> bool:
    """Record one attempt with a recorder of its own; see `Recorder.record_attempts`."""
    return Recorder(store).record_attempt(record)


def record_attempts(store: GraphStore, records: Iterable[AttemptRecord], batch_size: int = BATCH_SIZE) -> int:
    """Record attempts with a recorder of their own (`Recorder.record_attempts`): a batch that raised part-way
    is left marked for `repair_pending`. A writer that records again and again keeps one `Recorder`."""
    return Recorder(store).record_attempts(records, batch_size)


def _record_batch(store: GraphStore, batch: Sequence[AttemptRecord]) -> int:
    token = uuid.uuid4().hex
    rows = store.run("attempt_merge", {"rows": [_merge_row(r) for r in batch], "token": token})
    new_keys = {row["key"] for row in rows if row["created"]}
    new = [r for r in batch if r.key in new_keys]
    if new:
        apply_steps(store, new)
    return len(new)


def apply_steps(store: GraphStore, records: Sequence[AttemptRecord]) -> None:
    """Run the four steps after attempt_merge. Each statement applies only to attempts still carrying that
    step's pending marker and clears it in the same statement, so running them again after a crash (by the
    same writer, or by `repair_pending` once no writer is live) never counts an attempt twice."""
    store.run("attempt_link", {"rows": [_link_row(r) for r in records]})
    evidence = [r for r in records if is_evidence(r)]
    for name, rows in (
        ("memory_global_stats", _global_rows(evidence)),
        ("memory_local_evidence", _local_rows(evidence)),
        ("memory_transitions", _transition_rows(evidence)),
    ):
        if rows:
            store.run(name, {"rows": rows})


def check_keys(
    store: GraphStore, globals_: Sequence[str] = (), locals_: Sequence[str] = (), gpus: Sequence[str] = ()
) -> list[str]:
    """Raise UnknownKeyError naming every global / local key the memory does not hold. Returns the `gpus`
    keys without a Gpu node yet (not an error: the caller creates them)."""
    if not globals_ and not locals_ and not gpus:
        return []
    rows = store.run(
        "memory_key_check", {"globals": list(globals_), "locals": list(locals_), "gpus": list(gpus)}
    )
    missing = [f"{r['label'].lower()} {r['key']!r}" for r in rows if not r["found"] and r["label"] != "Gpu"]
    if missing:
        raise UnknownKeyError(f"unknown key(s) in the memory: {', '.join(missing)}")
    return [r["key"] for r in rows if not r["found"] and r["label"] == "Gpu"]


def _dedupe(records: Iterable[AttemptRecord]) -> list[AttemptRecord]:
    seen: dict[str, AttemptRecord] = {}
    for r in records:
        if r.key in seen and seen[r.key] != r:
            raise ValueError(f"two different attempts share the key {r.key!r}")
        seen.setdefault(r.key, r)
    return list(seen.values())


def _merge_row(r: AttemptRecord) -> dict[str, Any]:
    return {
        "key": r.key,
        "props": _attempt_props(r),
        "kernel_key": kernel_key(r),
        "kernel_language": r.kernel_language.value if r.kernel_language else None,
        "kernel_source": r.kernel_source,
    }


def _attempt_props(r: AttemptRecord) -> dict[str, Any]:
    props = r.model_dump(mode="json", exclude={"key", "kernel_source"})
    evidence = is_evidence(r)
    props.update(
        gpu_arch=arch_of(r),
        kernel_sha256=kernel_key(r),
        positive=is_positive(r),
        created_ms=r.created_ms,
        # Pending-step markers (None: the step does not apply and is never marked); see apply_steps.
        pend_link=True,
        pend_global=True if evidence else None,
        pend_local=True if evidence and r.local_key else None,
        pend_transition=True if evidence and r.prev_global_key else None,
    )
    return drop_none(props)


def _link_row(r: AttemptRecord) -> dict[str, Any]:
    return {
        "key": r.key,
        "task_key": r.task_key,
        "run_key": r.run_key,
        "created_ms": r.created_ms,
        "global_key": r.global_key,
        "local_key": r.local_key,
        "positive": is_positive(r),
        "prev_attempt_key": r.prev_attempt_key,
        "kernel_key": kernel_key(r),
    }


def _global_rows(evidence: Sequence[AttemptRecord]) -> list[dict[str, Any]]:
    """One row per attempt: memory_global_stats aggregates per (global, gpu_arch) in Cypher, after keeping
    only attempts still pending the step (a per-key Python pre-aggregation could not honour that guard)."""
    return [
        {
            "key": r.key,
            "global_key": r.global_key,
            "gpu_arch": arch_of(r),
            "successes": int(is_positive(r)),
            "gain_sum": counted_gain(r),
            "compile_failures": int(not r.compiled),
        }
        for r in evidence
    ]


def _local_rows(evidence: Sequence[AttemptRecord]) -> list[dict[str, Any]]:
    """One row per attempt that applied a local strategy (aggregated per key in memory_local_evidence)."""
    return [
        {
            "key": r.key,
            "local_key": r.local_key,
            "gpu_arch": arch_of(r),
            "positives": int(is_positive(r)),
            "negatives": int(not is_positive(r)),
            "gain_sum": counted_gain(r),
        }
        for r in evidence
        if r.local_key is not None
    ]


def _transition_rows(evidence: Sequence[AttemptRecord]) -> list[dict[str, Any]]:
    """One row per attempt with a previous direction (aggregated per edge in memory_transitions)."""
    return [
        {
            "key": r.key,
            "src": r.prev_global_key,
            "dst": r.global_key,
            "gpu_arch": arch_of(r),
            "successes": int(is_positive(r)),
            "gain_sum": counted_gain(r),
            "compile_failures": int(not r.compiled),
        }
        for r in evidence
        if r.prev_global_key is not None
    ]
