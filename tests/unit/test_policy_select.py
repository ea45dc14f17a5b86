"""The pure policy: recency weights, softmax with exploration bonus, seeded sampling, UCB local choice."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from htam_graph import policy
from htam_graph.model import DirectionScore, LocalStrategy, LocalWithEvidence


def ds(key: str, score: float, support: int = 0) -> DirectionScore:
    return DirectionScore(key=key, score=score, support=support)


def loc(key: str, attempts: int = 0, gain_sum: float = 0.0) -> LocalWithEvidence:
    strategy = LocalStrategy(key=key, name=key, global_key="g", languages=["triton"], pattern="p")
    return LocalWithEvidence(
        strategy=strategy, attempts=attempts, positives=0, negatives=attempts, gain_sum=gain_sum
    )


def test_recency_weights_are_normalised_and_favour_the_newest() -> None:
    w = policy.recency_weights(4, 0.7)
    assert sum(w) == pytest.approx(1.0)
    assert w == sorted(w)  # oldest first, newest last and largest
    assert w[-1] / w[-2] == pytest.approx(math.exp(0.7))
    assert policy.recency_weights(3, 0.0) == pytest.approx([1 / 3] * 3)
    assert policy.recency_weights(0, 1.0) == []


def test_softmax_sums_to_one_and_ranks_by_score() -> None:
    ranked = policy.with_probabilities(
        [ds("a", 0.1), ds("b", 0.3), ds("c", 0.2)], temperature=0.1, explore_bonus=0.0
    )
    assert [d.key for d in ranked] == ["b", "c", "a"]
    assert sum(d.probability for d in ranked) == pytest.approx(1.0)
    assert ranked[0].probability / ranked[1].probability == pytest.approx(math.exp(1.0))


def test_temperature_limits() -> None:
    scores = [ds("a", 0.1), ds("b", 0.12), ds("c", -0.5)]
    cold = {d.key: d.probability for d in policy.with_probabilities(scores, 1e-6, 0.0)}
    assert cold["b"] == pytest.approx(1.0) and cold["a"] == pytest.approx(0.0)
    hot = {d.key: d.probability for d in policy.with_probabilities(scores, 1e6, 0.0)}
    assert all(p == pytest.approx(1 / 3, rel=1e-4) for p in hot.values())
    tie = {d.key: d.probability for d in policy.with_probabilities([ds("x", 1.0), ds("y", 1.0)], 1e-9, 0.0)}
    assert tie == {"x": pytest.approx(0.5), "y": pytest.approx(0.5)}
    with pytest.raises(ValueError):
        policy.with_probabilities(scores, 0.0, 0.0)


def test_exploration_bonus_favours_less_supported_directions() -> None:
    ranked = policy.with_probabilities([ds("known", 0.1, support=99), ds("new", 0.1, support=0)], 0.05, 0.02)
    probs = {d.key: d.probability for d in ranked}
    assert probs["new"] > probs["known"]
    bonus_gap = 0.02 / 1.0 - 0.02 / 10.0
    assert probs["new"] / probs["known"] == pytest.approx(math.exp(bonus_gap / 0.05))


def test_sampling_is_reproducible_and_follows_the_probabilities() -> None:
    ranked = policy.with_probabilities([ds("a", 0.0), ds("b", 0.05), ds("c", 0.1)], 0.05, 0.0)
    first = [policy.sample_direction(ranked, random.Random(42)).key for _ in range(5)]
    assert len(set(first)) == 1
    rng1, rng2 = random.Random(9), random.Random(9)
    assert [policy.sample_direction(ranked, rng1).key for _ in range(50)] == [
        policy.sample_direction(list(reversed(ranked)), rng2).key for _ in range(50)
    ]  # input order is irrelevant
    rng = random.Random(1)
    counts = Counter(policy.sample_direction(ranked, rng).key for _ in range(6000))
    probs = {d.key: d.probability for d in ranked}
    for k in "abc":
        assert counts[k] / 6000 == pytest.approx(probs[k], abs=0.025)


def test_exclude_renormalises_and_refuses_an_empty_pool() -> None:
    ranked = policy.with_probabilities([ds("a", 0.0), ds("b", 1.0)], 0.01, 0.0)
    rng = random.Random(0)
    assert {policy.sample_direction(ranked, rng, exclude={"b"}).key for _ in range(20)} == {"a"}
    with pytest.raises(ValueError):
        policy.sample_direction(ranked, rng, exclude={"a", "b"})


def test_uniform_policy() -> None:
    u = policy.uniform(["b", "a", "c", "a"])
    assert [d.key for d in u] == ["a", "b", "c"] and all(d.probability == pytest.approx(1 / 3) for d in u)


def test_select_local_tries_untried_first_with_a_seeded_tie_break() -> None:
    cands = [loc("g.a", 5, 1.0), loc("g.b"), loc("g.c")]
    picks = {policy.select_local(cands, random.Random(s), c=0.1).strategy.key for s in range(30)}
    assert picks == {"g.b", "g.c"}
    assert policy.select_local(cands, random.Random(4), 0.1) == policy.select_local(
        list(reversed(cands)), random.Random(4), 0.1
    )


def test_select_local_upper_confidence_rule() -> None:
    # mean 0.30 over 20 tries vs mean 0.25 over 2: the bonus c*sqrt(ln 22 / n) decides.
    cands = [loc("g.many", 20, 6.0), loc("g.few", 2, 0.5)]
    assert policy.select_local(cands, random.Random(0), c=0.0).strategy.key == "g.many"
    assert policy.select_local(cands, random.Random(0), c=0.5).strategy.key == "g.few"
    assert policy.ucb_value(cands[1], 22, 0.5) == pytest.approx(0.25 + 0.5 * math.sqrt(math.log(22) / 2))
    with pytest.raises(ValueError):
        policy.select_local([], random.Random(0), 0.1)
