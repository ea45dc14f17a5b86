"""The global-direction policy's pure part: recency weights, softmax with an exploration bonus, seeded
sampling, and the upper-confidence choice of a local strategy.

The precedent aggregation itself runs in the graph (`cypher/policy_score.cypher`, called by
`htam_graph.memory.score_directions`); this module turns its scores into probabilities and choices. Nothing
here does I/O; every random choice goes through the caller's seeded `random.Random`, so a run is reproducible.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from enum import StrEnum

from htam_graph.model import DirectionScore, LocalStrategy, LocalWithEvidence, PrecisionPolicy


class PolicyMode(StrEnum):
    """How directions are scored. The `flat` ablation is the loop's retrieval mode, not a scoring mode."""

    HTG = "htg"  # precedent aggregation over the recent directions' TRANSITION edges
    NO_TRANSITION = "no-transition"  # each global's own statistics only (the ablation)
    RANDOM = "random"  # uniform


POLICY_MODES: tuple[str, ...] = tuple(m.value for m in PolicyMode)


def recency_weights(history_len: int, decay: float) -> list[float]:
    """Normalised position weights for a history of `history_len` directions, oldest first.

    w_i = exp(-decay · age_i) / Σ_j exp(-decay · age_j), age_i = history_len - 1 - i (the newest has age 0).
    They sum to 1 like attention weights, so a candidate with no precedent at any position scores exactly
    `no_support_score` and scores stay comparable across history lengths.
    """
    if history_len <= 0:
        return []
    raw = [math.exp(-decay * (history_len - 1 - i)) for i in range(history_len)]
    total = sum(raw)
    return [w / total for w in raw]


def with_probabilities(
    scores: Iterable[DirectionScore], temperature: float, explore_bonus: float
) -> list[DirectionScore]:
    """Softmax over `score + explore_bonus / sqrt(1 + support)` at `temperature`.

    Returns the scores with `probability` filled, sorted by probability (then score) descending, key
    ascending. The maximum logit is subtracted before exponentiating, so a tiny temperature degrades to argmax
    (ties share).
    """
    items = list(scores)
    if not items:
        return []
    if temperature <= 0:
        raise ValueError("temperature must be > 0")
    logits = [(s.score + explore_bonus / math.sqrt(1 + s.support)) / temperature for s in items]
    top = max(logits)
    weights = [math.exp(x - top) for x in logits]
    total = sum(weights)
    ranked = [s.model_copy(update={"probability": w / total}) for s, w in zip(items, weights, strict=True)]
    ranked.sort(key=lambda s: (-s.probability, -s.score, s.key))
    return ranked


def uniform(keys: Iterable[str]) -> list[DirectionScore]:
    """The `random` policy: every direction scores 0 and is equally likely (sorted by key)."""
    ordered = sorted(set(keys))
    if not ordered:
        return []
    p = 1.0 / len(ordered)
    return [DirectionScore(key=k, score=0.0, support=0, probability=p) for k in ordered]


def sample_direction(
    scored: Sequence[DirectionScore], rng: random.Random, exclude: Iterable[str] = ()
) -> DirectionScore:
    """Draw one direction in proportion to `probability`, renormalised over the non-excluded ones.

    `exclude` is for directions that cannot be acted on (e.g. no local strategy applies to the task).
    Draws walk the candidates in key order, so the same rng state gives the same choice whatever order the
    caller passes. Raises ValueError when nothing is left to choose from.
    """
    pool, total = _pool(scored, exclude)
    if not pool:
        raise ValueError("no direction left to choose from (all excluded or none scored)")
    if total <= 0:  # every remaining probability underflowed: choose uniformly among them
        return pool[rng.randrange(len(pool))]
    point = rng.random() * total
    acc = 0.0
    for s in pool:
        acc += s.probability
        if point < acc:
            return s
    return pool[-1]  # float round-off at the top end


def drawn_probability(scored: Sequence[DirectionScore], key: str, exclude: Iterable[str] = ()) -> float:
    """The chance `sample_direction(scored, rng, exclude)` had of returning `key`: its probability
    renormalised over the non-excluded directions (uniform among them when every probability underflowed),
    0.0 when `key` is excluded or not scored. `probability` itself is over every direction, which understates
    a draw restricted to the directions a task allows."""
    pool, total = _pool(scored, exclude)
    chosen = next((s for s in pool if s.key == key), None)
    if chosen is None:
        return 0.0
    if total <= 0:
        return 1.0 / len(pool)
    return chosen.probability / total


def _pool(scored: Sequence[DirectionScore], exclude: Iterable[str]) -> tuple[list[DirectionScore], float]:
    """The directions a draw chooses among (not excluded, in key order) and their total probability."""
    banned = set(exclude)
    pool = sorted((s for s in scored if s.key not in banned), key=lambda s: s.key)
    return pool, sum(s.probability for s in pool)


def ucb_value(candidate: LocalWithEvidence, total_attempts: int, c: float) -> float:
    """Upper-confidence value of a local strategy: mean gain + c·sqrt(ln N / n); untried ones are +inf."""
    if candidate.attempts <= 0:
        return math.inf
    n_total = max(total_attempts, 1)
    return candidate.mean_gain + c * math.sqrt(math.log(n_total) / candidate.attempts)


def select_local(candidates: Sequence[LocalWithEvidence], rng: random.Random, c: float) -> LocalWithEvidence:
    """Choose a local strategy by the upper-confidence rule; ties (e.g. several untried) broken by `rng`.

    N is the number of attempts over all candidates. Raises ValueError on an empty list.
    """
    if not candidates:
        raise ValueError("no local strategy to choose from")
    total = sum(max(x.attempts, 0) for x in candidates)
    values = [(ucb_value(x, total, c), x) for x in sorted(candidates, key=lambda x: x.strategy.key)]
    best = max(v for v, _ in values)
    tied = [
        x for v, x in values if v == best or (math.isfinite(best) and math.isclose(v, best, abs_tol=1e-12))
    ]
    return tied[rng.randrange(len(tied))]


# ---------------------------------------------------------------------------------------------- applicability
GENERIC_TAGS: frozenset[str] = frozenset({"elementwise", "activation", "broadcast"})
"""Op tags nearly every task has (a bias add, an activation): sharing one of them says nothing about whether a
strategy fits a task that also has a defining operation (a conv, a reduction, a norm)."""


def defining_tags(task_tags: Iterable[str]) -> frozenset[str]:
    """A task's defining operations: its op tags other than the generic ones, or all of them when the task is
    made of generic operations only (an activation, an elementwise chain)."""
    tags = frozenset(task_tags)
    return (tags - GENERIC_TAGS) or tags


def relevance(strategy: LocalStrategy, task_tags: Iterable[str]) -> int | None:
    """How specifically a local strategy fits a task (higher: more specific); None when it does not apply.

    - A strategy without op tags applies to every task, least specifically (0).
    - A strategy with `requires_tags` is a combination (a library GEMM/conv and its epilogue, a reduction
      after a linear map): the task must have one of the required tags and, when the strategy names others,
      one of those.
    - A strategy tagged with generic tags only (an elementwise chain, activation math) applies where the task
      has one of those operations, whatever else it has.
    - Any other strategy must name one of the task's defining operations (`defining_tags`): one shared
      generic tag is not enough, so a norm-and-softmax strategy that also lists `elementwise` is not offered
      for a conv with an elementwise epilogue.
    The value is the number of the task's defining tags the strategy names.
    """
    tags = frozenset(task_tags)
    own = frozenset(strategy.op_tags)
    if not own:
        return 0
    defining = defining_tags(tags)
    required = frozenset(strategy.requires_tags)
    if required:
        rest = own - required
        if not (required & tags) or (rest and not (rest & tags)):
            return None
    elif own <= GENERIC_TAGS:
        if not (own & tags):
            return None
    elif not (own & defining):
        return None
    return len(own & defining)


PRECISION_GLOBAL = "precision"
"""The seed's reduced-precision direction (TF32, bf16): its strategies are for the tf32 / bf16 tracks only."""


def allowed_under(strategy: LocalStrategy, precision_policy: PrecisionPolicy) -> bool:
    """Whether a strategy may be offered under the run's precision policy: the reduced-precision direction's
    strategies never under fp32-strict, where TF32 or bf16 compute fails the 1e-4 check and counts as a
    hack."""
    return not (strategy.global_key == PRECISION_GLOBAL and precision_policy is PrecisionPolicy.FP32_STRICT)


def evidence_score(
    candidate: LocalWithEvidence, gpu_arch: str, foreign_weight: float, failure_penalty: float
) -> float:
    """A strategy's GPU evidence as one number: (Σ w·gain − failure_penalty·Σ w·failed) / (Σ w·attempts + 1),
    with this architecture's attempts weighted 1 and other architectures' `foreign_weight` (`by_arch`; CPU
    attempts are never there). Untried: 0; a strategy that won scores above it; one that only failed or slowed
    the kernel down scores below it. Without `by_arch`, the node totals (all GPU architectures) are used."""
    if not candidate.by_arch:
        gain, n, failed = candidate.gain_sum, float(candidate.attempts), 0.0
    else:
        gain = n = failed = 0.0
        for arch in candidate.by_arch:
            w = 1.0 if arch.gpu_arch == gpu_arch else foreign_weight
            gain += w * arch.gain_sum
            n += w * arch.attempts
            failed += w * arch.failed
    return (gain - failure_penalty * failed) / (n + 1.0)


def rank_offers(
    candidates: Sequence[LocalWithEvidence],
    task_tags: Iterable[str],
    gpu_arch: str,
    foreign_weight: float,
    failure_penalty: float,
) -> list[LocalWithEvidence]:
    """The applicable strategies, most relevant first, then by evidence (`evidence_score`), then by key: the
    order in which they are offered to a model (not by UCB novelty, which would put untried strategies first
    and cut the ones with real evidence)."""
    tags = list(task_tags)
    scored = [(relevance(c.strategy, tags), c) for c in candidates]
    usable = [(r, c) for r, c in scored if r is not None]
    usable.sort(
        key=lambda rc: (
            -rc[0],
            -evidence_score(rc[1], gpu_arch, foreign_weight, failure_penalty),
            rc[1].strategy.key,
        )
    )
    return [c for _, c in usable]


def direction_to_rest(history: Sequence[str], allowed: Sequence[str], run: int = 2) -> str | None:
    """The direction a draw sets aside so that none comes `run` + 1 times in a row: the one the last `run`
    steps all took, when another allowed direction exists; None otherwise (or when the run is shorter)."""
    if run <= 0 or len(history) < run:
        return None
    last = history[-run:]
    if len(set(last)) != 1:
        return None
    repeated = last[0]
    return repeated if any(d != repeated for d in allowed) else None
