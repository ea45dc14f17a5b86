"""The policy's precedent aggregation in the graph, checked against a pure-Python reimplementation, plus the
behaviours it must have: recency, shrinkage, compile penalty, per-architecture weighting, the ablations."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from typing import Any

import pytest

from htam_graph import memory, policy
from htam_graph.errors import UnknownKeyError
from htam_graph.model import AttemptRecord, GlobalDirection, SeedMemory, TransitionPrior
from htam_graph.settings import PolicySettings

KEYS = [f"g{i}" for i in range(6)]


def seed(priors: list[tuple[str, str]] = ()) -> SeedMemory:  # type: ignore[assignment]
    return SeedMemory(
        version=1,
        globals=[GlobalDirection(key=k, name=k, intent=k) for k in KEYS],
        locals=[],
        transitions=[TransitionPrior(src=s, dst=d, rationale="r") for s, d in priors],
    )


def rec(
    key: str,
    prev: str,
    dst: str,
    *,
    gain: float = 0.0,
    ok: bool = True,
    compiled: bool = True,
    arch: str = "sm_90",
) -> AttemptRecord:
    return AttemptRecord(
        key=key,
        run_key="r",
        task_key="t",
        step=1,
        global_key=dst,
        prev_global_key=prev,
        status="improved" if ok and gain > 0 else ("correct" if ok else "failed"),
        compiled=compiled,
        correct=ok and compiled,
        gain=gain if ok and compiled else 0.0,
        gpu_arch=arch,
        created_ms=1,
    )


def reference_scores(
    records: list[AttemptRecord],
    priors: set[tuple[str, str]],
    history: list[str],
    arch: str,
    s: PolicySettings,
) -> dict[str, tuple[float, int]]:
    """Independent reimplementation of policy_score.cypher from the raw records."""
    edges: dict[tuple[str, str], list[tuple[str, int, float, int]]] = defaultdict(list)
    per: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0])
    for r in records:
        e = per[(r.prev_global_key or "", r.global_key, r.gpu_arch)]
        clean = r.correct and r.compiled and r.error_kind is None and r.status != "failed"
        e[0] += 1
        e[1] += r.gain if clean else 0.0
        e[2] += 0 if r.compiled else 1
    for (src, dst, a), (n, g, f) in per.items():
        edges[(src, dst)].append((a, int(n), g, int(f)))
    for src, dst in priors:
        edges[(src, dst)].append(("prior", 0, 0.0, 0))
    recent = history[-s.history_k :]
    raw = [math.exp(-s.decay * (len(recent) - 1 - i)) for i in range(len(recent))]
    weights = [w / sum(raw) for w in raw]
    out: dict[str, tuple[float, int]] = {}
    for c in KEYS:
        score, support, seen = s.no_support_score, 0, False
        for prev, w in zip(recent, weights, strict=True):
            es = edges.get((prev, c))
            if not es:
                continue
            seen = True
            aw = [0.0 if a == "prior" else (1.0 if a == arch else s.foreign_weight) for a, *_ in es]
            n = sum(x * e[1] for x, e in zip(aw, es, strict=True))
            g = sum(x * e[2] for x, e in zip(aw, es, strict=True))
            f = sum(x * e[3] for x, e in zip(aw, es, strict=True))
            base = s.prior_gain if any(a == "prior" for a, *_ in es) else s.no_support_score
            u = (g + s.prior_strength * base - s.compile_penalty * f) / (n + s.prior_strength)
            score += w * (u - s.no_support_score)
            support += sum(e[1] for e in es)
        out[c] = (score if seen else s.no_support_score, support)
    return out


def scores_of(
    store: Any,
    history: list[str],
    s: PolicySettings,
    arch: str = "sm_90",
    mode: policy.PolicyMode = policy.PolicyMode.HTG,
) -> dict[str, tuple[float, int]]:
    return {
        d.key: (d.score, d.support)
        for d in memory.score_directions(store, history, gpu_arch=arch, settings=s, mode=mode)
    }


def test_query_matches_pure_python_on_a_random_graph(store: Any) -> None:
    rng = random.Random(7)
    priors = {(rng.choice(KEYS), rng.choice(KEYS)) for _ in range(6)}
    memory.seed_memory(store, seed(sorted(priors)))
    records = []
    for i in range(120):
        ok = rng.random() < 0.7
        compiled = ok or rng.random() < 0.5
        records.append(
            rec(
                f"a{i}",
                rng.choice(KEYS),
                rng.choice(KEYS),
                gain=rng.uniform(-0.4, 0.9),
                ok=ok,
                compiled=compiled,
                arch=rng.choice(["sm_90", "sm_80", "sm_100"]),
            )
        )
    memory.record_attempts(store, records, batch_size=37)
    settings = PolicySettings(
        history_k=3,
        decay=0.6,
        prior_gain=0.07,
        prior_strength=2.5,
        compile_penalty=0.3,
        no_support_score=-0.01,
        foreign_weight=0.4,
    )
    for trial in range(8):
        history = [rng.choice(KEYS) for _ in range(rng.randint(1, 5))]
        got = scores_of(store, history, settings, arch=("sm_90", "sm_80")[trial % 2])
        want = reference_scores(records, priors, history, ("sm_90", "sm_80")[trial % 2], settings)
        assert set(got) == set(KEYS)
        for k in KEYS:
            assert got[k][0] == pytest.approx(want[k][0], abs=1e-9, rel=0), (history, k)
            assert got[k][1] == want[k][1], (history, k)


def test_more_recent_precedent_weighs_more(store: Any) -> None:
    memory.seed_memory(store, seed())
    recs = [rec(f"x{i}", "g0", "g2", gain=0.5) for i in range(5)] + [
        rec(f"y{i}", "g1", "g3", gain=0.5) for i in range(5)
    ]
    memory.record_attempts(store, recs)
    s = PolicySettings(decay=1.0)
    newest_g1 = scores_of(store, ["g0", "g1"], s)
    assert newest_g1["g3"][0] > newest_g1["g2"][0]
    newest_g0 = scores_of(store, ["g1", "g0"], s)
    assert newest_g0["g2"][0] > newest_g0["g3"][0]


def test_shrinkage_prefers_many_moderate_successes_over_one_lucky_one(store: Any) -> None:
    memory.seed_memory(store, seed())
    memory.record_attempts(
        store, [rec("lucky", "g0", "g1", gain=1.0)] + [rec(f"m{i}", "g0", "g2", gain=0.5) for i in range(20)]
    )
    ranked = memory.score_directions(
        store, ["g0"], gpu_arch="sm_90", settings=PolicySettings(prior_strength=3.0, prior_gain=0.0)
    )
    order = [d.key for d in ranked]
    assert order.index("g2") < order.index("g1")
    by_key = {d.key: d for d in ranked}
    assert by_key["g1"].score == pytest.approx(1.0 / 4.0) and by_key["g2"].score == pytest.approx(10.0 / 23.0)
    assert (by_key["g1"].support, by_key["g2"].support) == (1, 20)


def test_compile_failures_lower_the_score(store: Any) -> None:
    memory.seed_memory(store, seed())
    memory.record_attempts(
        store,
        [
            rec("a", "g0", "g1", gain=0.3),
            rec("b", "g0", "g2", gain=0.3),
            rec("c", "g0", "g2", ok=False, compiled=False),
        ],
    )
    memory.record_attempts(store, [rec("d", "g0", "g1", ok=False, compiled=True)])  # wrong but compiled
    with_penalty = scores_of(store, ["g0"], PolicySettings(compile_penalty=0.5))
    without = scores_of(store, ["g0"], PolicySettings(compile_penalty=0.0))
    assert without["g1"][0] == pytest.approx(without["g2"][0])  # same counts and gains
    assert with_penalty["g2"][0] < with_penalty["g1"][0]
    assert without["g2"][0] - with_penalty["g2"][0] == pytest.approx(0.5 * 1 / (2 + 3.0))


def test_foreign_architecture_evidence_weighs_less(store: Any) -> None:
    memory.seed_memory(store, seed())
    memory.record_attempts(
        store, [rec("a", "g0", "g1", gain=0.6, arch="sm_80"), rec("b", "g0", "g2", gain=0.6, arch="sm_90")]
    )
    got = scores_of(store, ["g0"], PolicySettings(prior_gain=0.0, foreign_weight=0.5))
    assert got["g2"][0] == pytest.approx(0.6 / 4.0) and got["g1"][0] == pytest.approx(0.3 / 3.5)
    on_80 = scores_of(store, ["g0"], PolicySettings(prior_gain=0.0, foreign_weight=0.5), arch="sm_80")
    assert on_80["g1"][0] > on_80["g2"][0]


def test_priors_only_make_a_pair_known_and_unsupported_get_the_default(store: Any) -> None:
    memory.seed_memory(store, seed([("g0", "g1")]))
    s = PolicySettings(prior_gain=0.05, no_support_score=-0.2)
    got = scores_of(store, ["g0"], s)
    assert got["g1"] == (pytest.approx(0.05), 0)
    assert all(got[k] == (pytest.approx(-0.2), 0) for k in KEYS if k != "g1")
    assert all(v == (pytest.approx(-0.2), 0) for v in scores_of(store, [], s).values())


def test_no_transition_ablation_scores_globals_by_their_own_stats(store: Any) -> None:
    memory.seed_memory(store, seed())
    memory.record_attempts(
        store,
        [
            rec("a", "g0", "g1", gain=0.8),
            rec("b", "g3", "g1", gain=0.4),
            rec("c", "g0", "g2", ok=False, compiled=False),
        ],
    )
    s = PolicySettings(prior_gain=0.0, compile_penalty=0.2)
    got = scores_of(store, ["g5"], s, mode=policy.PolicyMode.NO_TRANSITION)  # history is ignored
    assert got["g1"] == (pytest.approx(1.2 / 5.0), 2)
    assert got["g2"] == (pytest.approx(-0.2 / 4.0), 1)
    assert got["g4"] == (pytest.approx(0.0), 0)


def test_random_mode_is_uniform_and_unknown_history_is_refused(store: Any) -> None:
    memory.seed_memory(store, seed())
    ranked = memory.score_directions(
        store, ["g0"], gpu_arch="sm_90", settings=PolicySettings(), mode=policy.PolicyMode.RANDOM
    )
    assert [d.key for d in ranked] == KEYS and all(d.probability == pytest.approx(1 / 6) for d in ranked)
    with pytest.raises(UnknownKeyError, match="nope"):
        memory.score_directions(store, ["g0", "nope"], gpu_arch="sm_90", settings=PolicySettings())


def test_probabilities_sum_to_one_and_sampling_is_reproducible(store: Any) -> None:
    memory.seed_memory(store, seed())
    memory.record_attempts(store, [rec(f"a{i}", "g0", f"g{1 + i % 3}", gain=0.1 * i) for i in range(6)])
    ranked = memory.score_directions(store, ["g0"], gpu_arch="sm_90", settings=PolicySettings())
    assert sum(d.probability for d in ranked) == pytest.approx(1.0)
    draws = [policy.sample_direction(ranked, random.Random(3)).key for _ in range(3)]
    assert len(set(draws)) == 1


def test_null_or_slower_evidence_never_lifts_a_transition(store: Any) -> None:
    """An observed transition is shrunk towards what was believed before it was tried: prior_gain for a pair the
    seed vouches for, no_support_score for any other. So trying a move and measuring no gain (every CPU attempt)
    or a slowdown can only lower it, never lift an unknown pair above the ones never tried."""
    memory.seed_memory(store, seed([("g0", "g1")]))
    memory.record_attempts(
        store,
        [
            rec("seeded_null", "g0", "g1", gain=0.0),  # a seeded pair, tried once without gain
            rec("null", "g0", "g2", gain=0.0),  # an unknown pair (e.g. a self-transition), no gain
            rec("slower", "g0", "g3", gain=-0.05),  # an unknown pair, measured 5% slower
            rec("faster", "g0", "g5", gain=0.4),  # an unknown pair, measured faster
        ],
    )
    s = PolicySettings()  # prior_gain 0.05, prior_strength 3, no_support_score 0
    got = scores_of(store, ["g0"], s)
    assert got["g4"] == (pytest.approx(0.0), 0)  # never tried
    assert got["g1"][0] == pytest.approx(3 * 0.05 / 4) and got["g1"][0] < 0.05  # lowered from the prior alone
    assert got["g2"] == (pytest.approx(0.0), 1)  # was 0.0375: above the never-tried g4
    assert got["g3"][0] == pytest.approx(-0.05 / 4) and got["g3"][0] < got["g4"][0]
    assert got["g5"][0] == pytest.approx(0.4 / 4)  # positive evidence still makes a pair worth taking
    probs = {
        d.key: d.probability for d in memory.score_directions(store, ["g0"], gpu_arch="sm_90", settings=s)
    }
    assert probs["g2"] < probs["g4"] and probs["g3"] < probs["g4"]
