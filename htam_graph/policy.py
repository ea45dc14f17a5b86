"""The global-direction policy's pure part: recency weights, softmax with an exploration bonus, seeded sampling,
and the upper-confidence choice of a local strategy.

The precedent aggregation itself runs in the graph (`cypher/policy_score.cypher`, called by
`htam_graph.memory.score_directions`); this module turns its scores into probabilities and choices. Nothing here
does I/O; every random choice goes through the caller's seeded `random.Random`, so a run is reproducible.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from typing import Literal

from htam_graph.model import DirectionScore, LocalWithEvidence

PolicyMode = Literal["htg", "no-transition", "random"]
"""How directions are scored: `htg` (precedent aggregation over TRANSITION edges), `no-transition` (each
global's own stats only, the ablation), `random` (uniform). The `flat` ablation is the loop's retrieval mode."""

POLICY_MODES: tuple[PolicyMode, ...] = ("htg", "no-transition", "random")


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

    Returns the scores with `probability` filled, sorted by probability (then score) descending, key ascending.
    The maximum logit is subtracted before exponentiating, so a tiny temperature degrades to argmax (ties share).
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
    """The chance `sample_direction(scored, rng, exclude)` had of returning `key`: its probability renormalised
    over the non-excluded directions (uniform among them when every probability underflowed), 0.0 when `key` is
    excluded or not scored. `probability` itself is over every direction, which understates a draw restricted to
    the directions a task allows (level1/78: 0.066 reported for a 0.269 choice)."""
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
