"""Pricing, budget and retry policy."""

from __future__ import annotations

import random

import pytest

from htam_graph.errors import BackendError, BudgetExceeded, ConfigError
from htam_graph.llm.budget import BudgetTracker
from htam_graph.llm.pricing import Price, lookup_price, make_usage
from htam_graph.llm.retry import (
    RetryPolicy,
    TransientBackendError,
    call_with_retries,
    retry_after_s,
    status_error,
)
from htam_graph.model import Usage


def test_known_prices_and_dated_aliases() -> None:
    sonnet = lookup_price("claude-sonnet-4-6")
    assert sonnet == Price(3.0, 15.0, 3.75, 0.30)
    assert lookup_price("claude-sonnet-4-5-20250929") == sonnet
    assert lookup_price("claude-opus-4-1") == Price(15.0, 75.0, 18.75, 1.5)
    assert lookup_price("claude-haiku-4-5").input_per_mtok == 1.0  # type: ignore[union-attr]
    assert lookup_price("deepseek/deepseek-reasoner") == lookup_price("deepseek-reasoner")
    assert lookup_price("some-local-model") is None


def test_cost_of_a_call() -> None:
    usage = make_usage(
        Price(3.0, 15.0, 3.75, 0.3),
        "m",
        input_tokens=2_000_000,
        output_tokens=100_000,
        cache_read_tokens=1_000_000,
        cache_write_tokens=1_000_000,
    )
    assert usage.cost_usd == pytest.approx(6.0 + 1.5 + 3.75 + 0.3)
    assert usage.cost_known
    unknown = make_usage(None, "mystery", input_tokens=10, output_tokens=10)
    assert unknown.cost_usd == 0.0 and not unknown.cost_known and unknown.input_tokens == 10


def test_price_parse() -> None:
    assert Price.parse("3,15") == Price(3.0, 15.0, 3.0, 3.0)
    assert Price.parse("3,15,3.75,0.3") == Price(3.0, 15.0, 3.75, 0.3)
    for bad in ("3", "a,b", "1,-2", "1,2,3"):
        with pytest.raises(ConfigError):
            Price.parse(bad)


def test_budget_tracker_totals_and_limit() -> None:
    budget = BudgetTracker(limit_usd=1.0)
    budget.check()
    budget.add(Usage(input_tokens=10, output_tokens=5, cost_usd=0.6))
    budget.check()  # 0.6 < 1.0: the next call may start
    assert budget.remaining_usd == pytest.approx(0.4)
    budget.add(Usage(input_tokens=1, output_tokens=1, cache_read_tokens=7, cost_usd=0.5, cost_known=False))
    totals = budget.totals()
    assert (totals.calls, totals.input_tokens, totals.output_tokens, totals.cache_read_tokens) == (
        2,
        11,
        6,
        7,
    )
    assert totals.cost_usd == pytest.approx(1.1) and not totals.cost_known
    with pytest.raises(BudgetExceeded, match=r"^budget of \$1.00 spent \(\$1.1000 used\)$"):
        budget.check()
    assert budget.remaining_usd == 0.0
    BudgetTracker().check()  # no limit: never raises
    with pytest.raises(ConfigError):
        BudgetTracker(limit_usd=-1)


def test_backoff_is_exponential_jittered_and_capped() -> None:
    policy = RetryPolicy(max_attempts=6, base_delay_s=1.0, max_delay_s=5.0, rng=random.Random(0))
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (5, 5.0)]:
        delays = [policy.delay_s(attempt, None) for _ in range(200)]
        assert 0.0 <= min(delays) and max(delays) <= ceiling
        assert max(delays) > 0.8 * ceiling  # jitter spans the range, not a constant
    assert policy.delay_s(1, 3.0) == 3.0
    assert policy.delay_s(1, 300.0) == 5.0  # retry-after capped too


def test_call_with_retries_counts_attempts() -> None:
    calls: list[int] = []
    slept: list[float] = []
    policy = RetryPolicy(max_attempts=3, base_delay_s=0.0, sleep=slept.append)

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise TransientBackendError("HTTP 529", retry_after_s=None)
        return "ok"

    assert call_with_retries(flaky, policy, what="x") == "ok"
    assert len(calls) == 3 and len(slept) == 2

    def always() -> str:
        raise TransientBackendError("HTTP 503")

    with pytest.raises(BackendError, match="^x: gave up after 3 attempts: HTTP 503$"):
        call_with_retries(always, policy, what="x")

    def permanent() -> str:
        calls.append(1)
        raise BackendError("HTTP 400")

    calls.clear()
    with pytest.raises(BackendError, match="HTTP 400"):
        call_with_retries(permanent, policy, what="x")
    assert len(calls) == 1


def test_status_classification() -> None:
    for status in (408, 429, 500, 502, 503, 529):
        assert isinstance(status_error("p", status, "d", {}), TransientBackendError), status
    for status in (400, 401, 403, 404, 413):
        error = status_error("p", status, "d", {})
        assert not isinstance(error, TransientBackendError) and str(error) == f"p: HTTP {status}: d"
    assert retry_after_s({"retry-after": "2"}) == 2.0
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None
    assert retry_after_s(None) is None
