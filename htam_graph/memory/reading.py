"""Reading the memory: global directions, the local strategies under one with their evidence, worked
examples, the `flat` ablation's retrieval, a summary, and the policy's direction scores."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from htam_graph import policy
from htam_graph.errors import UnknownKeyError
from htam_graph.memory.common import UNKNOWN_ARCH
from htam_graph.model import (
    ArchEvidence,
    AttemptExample,
    DirectionScore,
    GlobalDirection,
    LocalStrategy,
    LocalWithEvidence,
)
from htam_graph.ports import GraphStore
from htam_graph.settings import PolicySettings

__all__ = [
    "MemorySummary",
    "TransitionSummary",
    "directions",
    "examples_for",
    "locals_for",
    "memory_summary",
    "score_directions",
    "similar_attempts",
    "with_outcomes",
]


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
    return [_local_with_evidence(r, global_key) for r in rows]


def _local_with_evidence(r: dict[str, Any], global_key: str) -> LocalWithEvidence:
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
    return LocalWithEvidence(
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
    """Up to `limit` positive (best first) then up to `limit` negative (worst first) past attempts that
    applied `local_key` on tasks sharing an op tag (None: any task), each with the kernel source it
    produced."""
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


def score_directions(
    store: GraphStore,
    history: Sequence[str],
    *,
    gpu_arch: str,
    settings: PolicySettings,
    mode: policy.PolicyMode = policy.PolicyMode.HTG,
) -> list[DirectionScore]:
    """Score every global direction as the next one after `history` (oldest first; the last K are used) and
    attach softmax probabilities; sorted by probability. Raises UnknownKeyError for a history key not
    held."""
    keys = [r["key"] for r in store.run("memory_global_keys")]
    unknown = sorted(set(history) - set(keys))
    if unknown:
        raise UnknownKeyError(f"unknown direction(s) in the history: {', '.join(unknown)}")
    mode = policy.PolicyMode(mode)
    if mode is policy.PolicyMode.RANDOM:
        return policy.uniform(keys)
    shared = {
        "gpu_arch": gpu_arch or UNKNOWN_ARCH,
        "foreign_weight": settings.foreign_weight,
        "prior_gain": settings.prior_gain,
        "prior_strength": float(settings.prior_strength),
        "compile_penalty": settings.compile_penalty,
    }
    if mode is policy.PolicyMode.NO_TRANSITION:
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
