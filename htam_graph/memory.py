"""The HTG memory operations: seeding, recording attempt outcomes, and reading directions, strategies, examples
and policy scores. Orchestration only: every statement is a named `.cypher` file run through the `GraphStore`
port. Per-attempt values (polarity, counted gain) are computed here in Python; the per-key sums are formed
inside each statement, after it has kept only the attempts still pending that step.

Evidence semantics (one attempt):
- positive iff status == "improved", compiled, correct, no error kind (so never `hack_detected`) and gain > 0;
  everything else is negative evidence for the local strategy it applied;
- counted gain = `gain` when the attempt is correct, clean and not failed, else 0.0 (a failure adds a count and
  no gain, so it lowers the mean);
- compile failure iff not compiled;
- an attempt that ran on the CPU (Triton interpreted: correctness only, timings meaningless) or failed for
  infrastructure reasons is recorded (Attempt, Kernel, links) but is never evidence: it adds no statistics and is
  never an example, so nothing measured by the interpreter weighs in a GPU decision. `repair_cpu_evidence` moves
  out what a version without this rule counted.
Stats are sums and counts (means derived on read), kept in totals on the nodes and per GPU architecture on
STATS_ON / EVIDENCE_ON edges to `(:Gpu)` and on one TRANSITION edge per (src, dst, gpu_arch).

Crash safety (neither engine gives multi-statement transactions through the port; each statement is atomic):
a new Attempt carries one marker per step still to apply (`pend_link`, `pend_global`, `pend_local`,
`pend_transition`); each step's statement filters on its marker, aggregates per key in Cypher, applies the
increments and clears the marker in one statement. `repair_pending` re-runs the steps of marked attempts.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
import uuid
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from htam_graph import policy
from htam_graph.errors import UnknownKeyError
from htam_graph.model import (
    ArchEvidence,
    AttemptExample,
    AttemptRecord,
    DirectionScore,
    ErrorKind,
    GlobalDirection,
    LocalStrategy,
    LocalWithEvidence,
    RunRecord,
    SeedMemory,
)
from htam_graph.ports import GraphStore
from htam_graph.settings import PolicySettings

log = logging.getLogger(__name__)

PRIOR_ARCH = "prior"  # gpu_arch of the seed's prior TRANSITION edges; reserved
UNKNOWN_ARCH = "unknown"  # gpu_arch recorded when an attempt names none
CPU_ARCH = "cpu"  # gpu_arch of an attempt evaluated on the CPU (never evidence)
BATCH_SIZE = 1000
# Batches this process failed to finish, per store object: the next record_attempts on the same store re-applies
# their steps first (only this writer touches its own attempts, so that never races another writer). Attempts a
# *killed* process left pending are completed by `repair_pending`, which the CLI runs where no other writer of the
# graph is expected to be live (memory commands, export, the start of run and bench): on FalkorDB a statement's
# MATCH/WHERE may read before another writer's commit, so a repair racing a live writer can count its attempts
# twice (seen: 4 concurrent writers, 228 global attempts counted for 120 when every writer repaired first).
_UNFINISHED: weakref.WeakKeyDictionary[GraphStore, list[AttemptRecord]] = weakref.WeakKeyDictionary()


class SeedCounts(BaseModel):
    """What `seed_memory` merged (entries of the seed file; re-seeding merges the same entries again)."""

    model_config = ConfigDict(frozen=True)
    version: int
    globals: int
    locals: int
    transitions: int


class TransitionSummary(BaseModel):
    """One observed TRANSITION edge (evidence of one GPU architecture)."""

    model_config = ConfigDict(frozen=True)
    src: str
    dst: str
    gpu_arch: str
    count: int
    successes: int
    gain_sum: float
    compile_failures: int

    @property
    def mean_gain(self) -> float:
        return self.gain_sum / self.count if self.count else 0.0


class MemorySummary(BaseModel):
    """Counts per node label and relationship type, and the strongest observed transitions."""

    model_config = ConfigDict(frozen=True)
    labels: dict[str, int]
    relationships: dict[str, int]
    top_transitions: list[TransitionSummary]


# ------------------------------------------------------------------------------------------------ seeding
def seed_memory(store: GraphStore, seed: SeedMemory) -> SeedCounts:
    """MERGE the seed's globals, locals (with REFINES) and prior transitions. Idempotent: descriptive properties
    are updated from the file, evidence (counts, sums, per-arch edges) is never touched."""
    globals_rows = [{"key": g.key, "props": g.model_dump(mode="json", exclude={"key"})} for g in seed.globals]
    locals_rows = [
        {"key": loc.key, "global_key": loc.global_key, "props": loc.model_dump(mode="json", exclude={"key"})}
        for loc in seed.locals
    ]
    pairs: dict[tuple[str, str], dict[str, Any]] = {}
    for t in seed.transitions:  # one row per (src, dst): a batch must not MERGE one edge twice
        pairs[(t.src, t.dst)] = t.model_dump(mode="json")
    store.run("seed_globals", {"rows": globals_rows})
    store.run("seed_locals", {"rows": locals_rows})
    store.run("seed_transitions", {"rows": list(pairs.values())})
    store.run("seed_mark", {"version": seed.version, "digest": seed_digest(seed), "seeded_ms": now_ms()})
    log.info(
        "seeded memory v%d: %d globals, %d locals, %d priors",
        seed.version,
        len(globals_rows),
        len(locals_rows),
        len(pairs),
    )
    return SeedCounts(
        version=seed.version, globals=len(globals_rows), locals=len(locals_rows), transitions=len(pairs)
    )


def seed_digest(seed: SeedMemory) -> str:
    """sha256 of the seed's content: any edit of the seed file (a new Local, a changed op tag) changes it."""
    return hashlib.sha256(seed.model_dump_json().encode()).hexdigest()


def ensure_seeded(store: GraphStore, seed: SeedMemory | None = None) -> SeedCounts | None:
    """Seed when the graph holds no Global node, its recorded seed version is older than `seed`'s (default: the
    packaged seed file) or its content differs from the seed last applied (an edit without a version bump: a
    Local's op_tags fixed in the file once never reached a bench's existing memory). Seeding is idempotent and
    keeps the evidence. Returns the counts when it seeded, None when the memory was current."""
    if seed is None:
        from htam_graph.seed import load_seed

        seed = load_seed()
    state = store.run("seed_state")[0]
    stored = state["version"]
    if int(state["globals"]) > 0 and stored is not None:
        if int(stored) > seed.version:
            return None  # a memory seeded by a newer release: its descriptions are newer than this file's
        if int(stored) == seed.version and state.get("digest") == seed_digest(seed):
            return None
    return seed_memory(store, seed)


# ------------------------------------------------------------------------------------------------ recording
def is_positive(record: AttemptRecord) -> bool:
    """Positive evidence: improved and passed every hardened check. Any failure or hack is negative."""
    return (
        record.status == "improved"
        and record.compiled
        and record.correct
        and record.error_kind is None
        and record.gain > 0.0
    )


def ran_on_cpu(record: AttemptRecord) -> bool:
    """The attempt was evaluated on the CPU (Triton's interpreter): its device says so, or, on records written
    before the device was recorded, its architecture 'cpu'."""
    return record.device == "cpu" or record.gpu_arch == CPU_ARCH


def is_evidence(record: AttemptRecord) -> bool:
    """Whether the attempt says anything about its strategy on a GPU. An infrastructure failure (the harness ran
    out of GPU memory, the worker could not start) is not the strategy's failure (evaluation.md pitfall 19), and a
    CPU attempt ran interpreted Triton, whose speed says nothing about a GPU: both are recorded as Attempts but
    add no statistics."""
    return record.error_kind is not ErrorKind.INFRA_ERROR and not ran_on_cpu(record)


def counted_gain(record: AttemptRecord) -> float:
    """The gain added to the sums: the attempt's gain when it is correct and clean, else 0.0."""
    clean = record.correct and record.compiled and record.error_kind is None and record.status != "failed"
    return float(record.gain) if clean else 0.0


def record_run(store: GraphStore, run: RunRecord) -> None:
    """Write a run's description onto its Run node (attempts link to it by `run_key`)."""
    props = _drop_none(run.model_dump(mode="json", exclude={"key"}))
    store.run("memory_run_merge", {"key": run.key, "props": props})


def record_attempt(store: GraphStore, record: AttemptRecord) -> bool:
    """Record one attempt; see `record_attempts`. Returns True when it was new (False: already recorded)."""
    return record_attempts(store, [record]) == 1


def record_attempts(store: GraphStore, records: Iterable[AttemptRecord], batch_size: int = BATCH_SIZE) -> int:
    """Record attempts in batches: outcome records, global stats, local evidence and transitions.

    An attempt whose key is already in the graph is skipped entirely (re-recording and re-importing are
    no-ops, also between concurrent writers). Crash-safe: attempt_merge marks each new attempt with its pending
    steps and every later statement applies and clears its step atomically, so a writer killed between two
    statements leaves marked attempts that `repair_pending` completes exactly once (the CLI runs it where no
    other writer is live); a batch of this writer that failed half-way is finished by its next call on the
    same store. Raises UnknownKeyError, before writing anything, when a global or local key is not in the memory. Returns the number of attempts newly recorded.
    """
    unique = _dedupe(records)
    if not unique:
        return 0
    stamp = now_ms()  # one creation time for records that carry none, shared by every statement
    unique = [r if r.created_ms else r.model_copy(update={"created_ms": stamp}) for r in unique]
    for r in unique:
        if r.gpu_arch == PRIOR_ARCH:
            raise ValueError(f"attempt {r.key!r}: gpu_arch {PRIOR_ARCH!r} is reserved for seed priors")
    missing_gpus = check_keys(
        store,
        globals_=sorted(
            {r.global_key for r in unique} | {r.prev_global_key for r in unique if r.prev_global_key}
        ),
        locals_=sorted({r.local_key for r in unique if r.local_key}),
        gpus=sorted({arch_of(r) for r in unique}),
    )
    if missing_gpus:
        store.run("memory_gpu_merge", {"keys": missing_gpus})
    _finish_own(store)  # one of our own earlier batches failed half-way: finish it before adding more
    created = 0
    start = 0
    try:
        for start in range(0, len(unique), batch_size):
            created += _record_batch(store, unique[start : start + batch_size])
    except BaseException:
        with contextlib.suppress(TypeError):  # a store that cannot be weakly referenced: repair_pending only
            _UNFINISHED.setdefault(store, []).extend(unique[start : start + batch_size])
        raise
    return created


def _finish_own(store: GraphStore) -> None:
    """Re-apply the steps of this writer's own half-applied batches (each step only where still pending)."""
    try:
        pending = _UNFINISHED.pop(store, None)
    except TypeError:
        return
    if not pending:
        return
    try:
        _apply_steps(store, pending)
    except BaseException:
        _UNFINISHED[store] = pending
        raise


def _record_batch(store: GraphStore, batch: Sequence[AttemptRecord]) -> int:
    token = uuid.uuid4().hex
    rows = store.run("attempt_merge", {"rows": [_merge_row(r) for r in batch], "token": token})
    new_keys = {row["key"] for row in rows if row["created"]}
    new = [r for r in batch if r.key in new_keys]
    if new:
        _apply_steps(store, new)
    return len(new)


def _apply_steps(store: GraphStore, records: Sequence[AttemptRecord]) -> None:
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


def repair_pending(store: GraphStore, batch_size: int = BATCH_SIZE) -> int:
    """Complete the recording steps a killed writer left undone (attempts still carrying a pending marker)
    from their stored properties; returns how many attempts were pending. Idempotent: a second call finds
    nothing. First moves out any CPU evidence an older version counted (`repair_cpu_evidence`). Run it only where no other writer of the graph is live (see `_UNFINISHED`): a live writer's
    attempts are pending too, and re-applying them concurrently can count them twice on FalkorDB."""
    repair_cpu_evidence(store)
    repaired = 0
    after = ""
    while True:
        rows = store.run("attempt_pending", {"after": after, "limit": batch_size})
        if not rows:
            break
        records = [_stored_record(r["key"], r["props"]) for r in rows]
        _apply_steps(store, records)
        repaired += len(records)
        after = rows[-1]["key"]
        if len(rows) < batch_size:
            break
    if repaired:
        log.warning("completed the recording of %d attempt(s) an interrupted writer left pending", repaired)
    return repaired


def repair_cpu_evidence(store: GraphStore) -> int:
    """Move out of the statistics what CPU attempts added under a version that counted them as evidence (their
    STATS_ON / EVIDENCE_ON edges to the Gpu 'cpu' are subtracted from the node totals and deleted, their
    TRANSITION edges deleted) and clear the statistics markers of CPU attempts left pending. Each statement is
    atomic and leaves nothing for a second run to find, so an interrupted repair is finished by the next one.
    Returns the number of edges and attempts repaired (0 on a graph that never counted a CPU attempt)."""
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
    """The AttemptRecord an Attempt node was written from (without its kernel source, which lives on the Kernel
    node attempt_merge created; `kernel_sha256` names it)."""
    fields = {k: v for k, v in props.items() if k in AttemptRecord.model_fields and k != "key"}
    return AttemptRecord(key=key, **fields)


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


def arch_of(record: AttemptRecord) -> str:
    """The GPU architecture evidence is filed under ('unknown' when the attempt names none)."""
    return record.gpu_arch or UNKNOWN_ARCH


def kernel_key(record: AttemptRecord) -> str | None:
    """The Kernel node key: the given sha256, else the sha256 of the source, else None (no kernel)."""
    if record.kernel_sha256:
        return record.kernel_sha256
    if record.kernel_source is not None:
        return hashlib.sha256(record.kernel_source.encode("utf-8")).hexdigest()
    return None


def _dedupe(records: Iterable[AttemptRecord]) -> list[AttemptRecord]:
    seen: dict[str, AttemptRecord] = {}
    for r in records:
        if r.key in seen and seen[r.key] != r:
            raise ValueError(f"two different attempts share the key {r.key!r}")
        seen.setdefault(r.key, r)
    return list(seen.values())


PENDING_STEPS = ("pend_link", "pend_global", "pend_local", "pend_transition")  # markers on an Attempt node


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
        # Pending-step markers (None: the step does not apply and is never marked); see _apply_steps.
        pend_link=True,
        pend_global=True if evidence else None,
        pend_local=True if evidence and r.local_key else None,
        pend_transition=True if evidence and r.prev_global_key else None,
    )
    return _drop_none(props)


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


# ------------------------------------------------------------------------------------------------ reading
def directions(store: GraphStore) -> list[GlobalDirection]:
    """Every global direction, by key."""
    return [
        GlobalDirection(
            key=r["key"],
            name=r["name"] or r["key"],
            intent=r["intent"] or "",
            goals=r["goals"] or [],
            triggers=r["triggers"] or [],
            risks=r["risks"] or [],
        )
        for r in store.run("memory_directions")
    ]


def locals_for(
    store: GraphStore, global_key: str, language: str | None = None, op_tags: Sequence[str] | None = None
) -> list[LocalWithEvidence]:
    """The local strategies refining `global_key` that fit the language and task op tags (None: any), with
    their evidence totals and their best positive / worst negative attempt (and kernel) for examples."""
    rows = store.run(
        "memory_locals_for",
        {
            "global_key": global_key,
            "language": language,
            "op_tags": list(op_tags) if op_tags is not None else None,
        },
    )
    out = []
    for r in rows:
        p = r["props"]
        strategy = LocalStrategy(
            key=r["key"],
            name=p.get("name") or r["key"],
            global_key=p.get("global_key") or global_key,
            languages=p.get("languages") or [],
            pattern=p.get("pattern") or "",
            applicable_when=p.get("applicable_when") or [],
            op_tags=p.get("op_tags") or [],
            requires_tags=p.get("requires_tags") or [],
            checks=p.get("checks") or [],
            risks=p.get("risks") or [],
        )
        out.append(
            LocalWithEvidence(
                strategy=strategy,
                attempts=int(p.get("attempts") or 0),
                positives=int(p.get("positives") or 0),
                negatives=int(p.get("negatives") or 0),
                gain_sum=float(p.get("gain_sum") or 0.0),
                best_attempt_key=r["best_attempt_key"],
                best_kernel_key=r["best_kernel_key"],
                worst_attempt_key=r["worst_attempt_key"],
                worst_kernel_key=r["worst_kernel_key"],
            )
        )
    return out


def with_outcomes(store: GraphStore, candidates: Sequence[LocalWithEvidence]) -> list[LocalWithEvidence]:
    """`candidates` with `by_arch` filled: what their (GPU, non-infrastructure) attempts came to per
    architecture, with "correct but not faster" counted apart from "failed"."""
    if not candidates:
        return []
    rows = store.run("memory_local_outcomes", {"local_keys": [c.strategy.key for c in candidates]})
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        arch = found.setdefault(r["local_key"], {}).setdefault(r["gpu_arch"], {"gain_sum": 0.0})
        status = r["status"] if r["status"] in ("improved", "correct") else "failed"
        arch[status] = arch.get(status, 0) + int(r["attempts"])
        arch["gain_sum"] += float(r["gain_sum"] or 0.0)
    return [
        c.model_copy(
            update={
                "by_arch": [
                    ArchEvidence(gpu_arch=arch, **counts)
                    for arch, counts in sorted(found.get(c.strategy.key, {}).items())
                ]
            }
        )
        for c in candidates
    ]


def examples_for(
    store: GraphStore, local_key: str, op_tags: Sequence[str] | None = None, limit: int = 2
) -> list[AttemptExample]:
    """Up to `limit` positive (best first) then up to `limit` negative (worst first) past attempts that applied
    `local_key` on tasks sharing an op tag (None: any task), each with the kernel source it produced."""
    tags = list(op_tags) if op_tags is not None else None
    out: list[AttemptExample] = []
    for positive in (True, False):
        rows = store.run(
            "memory_examples", {"local_key": local_key, "op_tags": tags, "positive": positive, "limit": limit}
        )
        out.extend(AttemptExample(**r) for r in rows)
    return out


def similar_attempts(
    store: GraphStore, op_tags: Sequence[str], limit: int = 5, exclude_task_key: str | None = None
) -> list[AttemptExample]:
    """The `flat` ablation's retrieval: past attempts on other tasks sharing an op tag, best first."""
    rows = store.run(
        "memory_similar_attempts",
        {"op_tags": list(op_tags), "exclude_task_key": exclude_task_key, "limit": limit},
    )
    return [AttemptExample(**r) for r in rows]


def memory_summary(store: GraphStore, top: int = 10) -> MemorySummary:
    """Node counts per label, relationship counts per type, and the `top` strongest observed transitions."""
    labels = {r["label"]: int(r["count"]) for r in store.run("memory_count_labels")}
    types = {r["type"]: int(r["count"]) for r in store.run("memory_count_types")}
    top_rows = store.run("memory_top_transitions", {"limit": top})
    return MemorySummary(
        labels=labels, relationships=types, top_transitions=[TransitionSummary(**r) for r in top_rows]
    )


# ------------------------------------------------------------------------------------------------ policy
def score_directions(
    store: GraphStore,
    history: Sequence[str],
    *,
    gpu_arch: str,
    settings: PolicySettings,
    mode: policy.PolicyMode = "htg",
) -> list[DirectionScore]:
    """Score every global direction as the next one after `history` (oldest first; the last K are used) and
    attach softmax probabilities; sorted by probability. Raises UnknownKeyError for a history key not held."""
    keys = [r["key"] for r in store.run("memory_global_keys")]
    unknown = sorted(set(history) - set(keys))
    if unknown:
        raise UnknownKeyError(f"unknown direction(s) in the history: {', '.join(unknown)}")
    if mode == "random":
        return policy.uniform(keys)
    arch = gpu_arch or UNKNOWN_ARCH
    shared = {
        "gpu_arch": arch,
        "foreign_weight": settings.foreign_weight,
        "prior_gain": settings.prior_gain,
        "prior_strength": float(settings.prior_strength),
        "compile_penalty": settings.compile_penalty,
    }
    if mode == "no-transition":
        rows = store.run("policy_global_stats", shared)
    else:
        recent = list(history)[-settings.history_k :]
        rows = store.run(
            "policy_score",
            {
                **shared,
                "history": recent,
                "weights": policy.recency_weights(len(recent), settings.decay),
                "no_support_score": settings.no_support_score,
            },
        )
    scored = {
        r["candidate"]: DirectionScore(key=r["candidate"], score=float(r["score"]), support=int(r["support"]))
        for r in rows
    }
    for k in keys:
        scored.setdefault(k, DirectionScore(key=k, score=settings.no_support_score, support=0))
    return policy.with_probabilities(scored.values(), settings.temperature, settings.explore_bonus)


def now_ms() -> int:
    """Wall-clock epoch milliseconds (time is always written from Python)."""
    return int(time.time() * 1000)


def _drop_none(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}
