"""Dollar and token accounting for one run, and the budget check made before every paid call."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

from htam_graph.errors import BudgetExceeded, ConfigError
from htam_graph.model import Usage


@dataclass(frozen=True)
class RunTotals:
    """What a run has spent so far."""

    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float
    cost_known: bool  # False once any call had no known price (the dollar total is then a lower bound)


class SpendLedger(Protocol):
    """Dollars spent by several trackers together (a bench's shared budget; see
    htam_graph/bench/budget.py)."""

    def spent_usd(self) -> float:
        """The total recorded by every participant so far."""
        ...

    def record(self, usage: Usage) -> None:
        """Add one call's cost to the shared total."""
        ...


class BudgetTracker:
    """Accumulates the `Usage` of every generator call of a run and enforces an optional dollar limit.

    `check()` is called before a call starts: it raises `BudgetExceeded` once the spent total has reached the
    limit. A call that starts under the limit may end above it (a reply's cost is known only afterwards), so
    the overshoot is bounded by one call's cost.
    """

    def __init__(self, limit_usd: float | None = None, ledger: SpendLedger | None = None) -> None:
        """With a `ledger`, the limit applies to the ledger's shared total (every tracker writing to it), not
        to this tracker's own calls; `totals()` stays this tracker's own."""
        if limit_usd is not None and limit_usd < 0:
            raise ConfigError(f"budget must be >= 0 USD, got {limit_usd}")
        self.limit_usd = limit_usd
        self.ledger = ledger
        self._lock = threading.Lock()
        self._usages: list[Usage] = []

    def check(self) -> None:
        """Raise `BudgetExceeded` if the limit is set and already spent."""
        if self.limit_usd is None:
            return
        spent = self.spent_usd()
        if spent >= self.limit_usd:
            shared = "shared " if self.ledger is not None else ""
            raise BudgetExceeded(f"{shared}budget of ${self.limit_usd:.2f} spent (${spent:.4f} used)")

    def spent_usd(self) -> float:
        """What counts against the limit: the ledger's shared total, else this tracker's own."""
        return self.ledger.spent_usd() if self.ledger is not None else self.totals().cost_usd

    def add(self, usage: Usage) -> None:
        """Record one call's usage (a step's share of the run)."""
        with self._lock:
            self._usages.append(usage)
        if self.ledger is not None:
            self.ledger.record(usage)

    @property
    def remaining_usd(self) -> float | None:
        """Dollars left, or None without a limit."""
        if self.limit_usd is None:
            return None
        return max(0.0, self.limit_usd - self.spent_usd())

    def totals(self) -> RunTotals:
        """The run's totals so far."""
        with self._lock:
            usages = list(self._usages)
        return RunTotals(
            calls=len(usages),
            input_tokens=sum(u.input_tokens for u in usages),
            output_tokens=sum(u.output_tokens for u in usages),
            cache_read_tokens=sum(u.cache_read_tokens for u in usages),
            cache_write_tokens=sum(u.cache_write_tokens for u in usages),
            cost_usd=sum(u.cost_usd for u in usages),
            cost_known=all(u.cost_known for u in usages),
        )
