"""The HTG memory operations: seeding, recording attempt outcomes, and reading directions, strategies, examples
and policy scores. Orchestration only: every statement is a named `.cypher` file run through the `GraphStore`
port; all arithmetic that needs a whole batch (pre-aggregation per key) happens here in Python.

Evidence semantics (one attempt):
- positive iff status == "improved", compiled, correct, no error kind (so never `hack_detected`) and gain > 0;
  everything else is negative evidence for the local strategy it applied;
- counted gain = `gain` when the attempt is correct, clean and not failed, else 0.0 (a failure adds a count and
  no gain, so it lowers the mean);
- compile failure iff not compiled.
Stats are sums and counts (means derived on read), kept in totals on the nodes and per GPU architecture on
STATS_ON / EVIDENCE_ON edges to `(:Gpu)` and on one TRANSITION edge per (src, dst, gpu_arch).
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from htam_graph import policy
from htam_graph.errors import UnknownKeyError
from htam_graph.model import (
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
BATCH_SIZE = 1000


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
    store.run("seed_mark", {"version": seed.version, "seeded_ms": now_ms()})
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


def ensure_seeded(store: GraphStore, seed: SeedMemory | None = None) -> SeedCounts | None:
    """Seed when the graph holds no Global node or its recorded seed version is older than `seed`'s
    (default: the packaged seed file). Returns the counts when it seeded, None when the memory was current."""
    if seed is None:
        from htam_graph.seed import load_seed

        seed = load_seed()
    state = store.run("seed_state")[0]
    stored = state["version"]
    if int(state["globals"]) > 0 and stored is not None and int(stored) >= seed.version:
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


def is_evidence(record: AttemptRecord) -> bool:
    """Whether the attempt says anything about its strategy. An infrastructure failure (the harness ran out of
    GPU memory, the worker could not start) is recorded as an Attempt but adds no statistics: it is not the
    strategy's failure (evaluation.md pitfall 19)."""
    return record.error_kind is not ErrorKind.INFRA_ERROR


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
    created = 0
    for start in range(0, len(unique), batch_size):
        created += _record_batch(store, unique[start : start + batch_size])
    return created


def _record_batch(store: GraphStore, batch: Sequence[AttemptRecord]) -> int:
    token = uuid.uuid4().hex
    rows = store.run(
        "attempt_merge", {"rows": [{"key": r.key, "props": _attempt_props(r)} for r in batch], "token": token}
    )
    new_keys = {row["key"] for row in rows if row["created"]}
    new = [r for r in batch if r.key in new_keys]
    if not new:
        return 0
    # Each of the four logical writes is one UNWIND statement over rows pre-aggregated per key.
    store.run("attempt_link", {"rows": [_link_row(r) for r in new]})
    evidence = [r for r in new if is_evidence(r)]
    if not evidence:
        return len(new)
    store.run("memory_global_stats", {"rows": _global_rows(evidence)})
    local_rows = _local_rows(evidence)
    if local_rows:
        store.run("memory_local_evidence", {"rows": local_rows})
    transition_rows = _transition_rows(evidence)
    if transition_rows:
        store.run("memory_transitions", {"rows": transition_rows})
    return len(new)


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


def _attempt_props(r: AttemptRecord) -> dict[str, Any]:
    props = r.model_dump(mode="json", exclude={"key", "kernel_source"})
    props.update(
        gpu_arch=arch_of(r), kernel_sha256=kernel_key(r), positive=is_positive(r), created_ms=r.created_ms
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
        "kernel_language": r.kernel_language.value if r.kernel_language else None,
        "kernel_source": r.kernel_source,
    }


def _add(acc: dict[str, Any], values: dict[str, Any]) -> None:
    for k, v in values.items():
        acc[k] = acc.get(k, 0) + v


def _global_rows(new: Sequence[AttemptRecord]) -> list[dict[str, Any]]:
    totals: dict[str, dict[str, Any]] = defaultdict(dict)
    per_arch: dict[str, dict[str, dict[str, Any]]] = defaultdict(lambda: defaultdict(dict))
    for r in new:
        d = {
            "attempts": 1,
            "successes": int(is_positive(r)),
            "gain_sum": counted_gain(r),
            "compile_failures": int(not r.compiled),
        }
        _add(totals[r.global_key], d)
        _add(per_arch[r.global_key][arch_of(r)], d)
    return [
        {
            "key": k,
            **_floaty(v),
            "archs": [{"gpu_arch": a, **_floaty(s)} for a, s in sorted(per_arch[k].items())],
        }
        for k, v in sorted(totals.items())
    ]


def _local_rows(new: Sequence[AttemptRecord]) -> list[dict[str, Any]]:
    totals: dict[str, dict[str, Any]] = defaultdict(dict)
    per_arch: dict[str, dict[str, dict[str, Any]]] = defaultdict(lambda: defaultdict(dict))
    for r in new:
        if r.local_key is None:
            continue
        pos = is_positive(r)
        d = {"attempts": 1, "positives": int(pos), "negatives": int(not pos), "gain_sum": counted_gain(r)}
        _add(totals[r.local_key], d)
        _add(per_arch[r.local_key][arch_of(r)], d)
    return [
        {
            "key": k,
            **_floaty(v),
            "archs": [{"gpu_arch": a, **_floaty(s)} for a, s in sorted(per_arch[k].items())],
        }
        for k, v in sorted(totals.items())
    ]


def _transition_rows(new: Sequence[AttemptRecord]) -> list[dict[str, Any]]:
    edges: dict[tuple[str, str, str], dict[str, Any]] = defaultdict(dict)
    for r in new:
        if r.prev_global_key is None:
            continue
        _add(
            edges[(r.prev_global_key, r.global_key, arch_of(r))],
            {
                "count": 1,
                "successes": int(is_positive(r)),
                "gain_sum": counted_gain(r),
                "compile_failures": int(not r.compiled),
            },
        )
    return [{"src": s, "dst": d, "gpu_arch": a, **_floaty(v)} for (s, d, a), v in sorted(edges.items())]


def _floaty(values: dict[str, Any]) -> dict[str, Any]:
    """Sums of gains are floats even when every gain was 0 (integer arithmetic truncates in Cypher)."""
    return {k: float(v) if k == "gain_sum" else int(v) for k, v in values.items()}


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
