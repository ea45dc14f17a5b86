"""`policy.drawn_probability`: the chance a restricted draw gave the chosen direction, as the loop records it."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from htam_graph import policy
from htam_graph.model import DirectionScore


def ranked(scores: dict[str, float]) -> list[DirectionScore]:
    items = [DirectionScore(key=k, score=v, support=0) for k, v in scores.items()]
    return policy.with_probabilities(items, temperature=0.05, explore_bonus=0.02)


def test_renormalised_over_the_allowed_directions() -> None:
    scored = ranked({"a": 0.05, "b": 0.0, **{f"x{i}": 0.0 for i in range(8)}})
    excluded = [f"x{i}" for i in range(8)]
    p_a = policy.drawn_probability(scored, "a", excluded)
    p_b = policy.drawn_probability(scored, "b", excluded)
    assert p_a + p_b == pytest.approx(1.0)
    assert p_a == pytest.approx(math.e / (1 + math.e))  # 0.731
    by_key = {s.key: s.probability for s in scored}
    assert by_key["a"] == pytest.approx(math.e / (9 + math.e))  # 0.232: its share of all ten globals
    assert policy.drawn_probability(scored, "x3", excluded) == 0.0
    assert policy.drawn_probability(scored, "nope") == 0.0
    assert policy.drawn_probability(scored, "a") == pytest.approx(by_key["a"])  # nothing excluded: unchanged


def test_matches_the_frequency_of_sample_direction() -> None:
    scored = ranked({"a": 0.05, "b": 0.02, "c": 0.0, "d": 0.1})
    rng = random.Random(5)
    counts = Counter(policy.sample_direction(scored, rng, exclude=["d"]).key for _ in range(6000))
    for k in "abc":
        assert counts[k] / 6000 == pytest.approx(policy.drawn_probability(scored, k, ["d"]), abs=0.025)


def test_underflowed_pool_is_uniform() -> None:
    scored = [DirectionScore(key=k, score=0.0, support=0, probability=0.0) for k in "abc"]
    assert policy.drawn_probability(scored, "b", ["c"]) == pytest.approx(0.5)
