"""A bench's shared dollar budget: `DIR/budget.jsonl`, one line per paid generator call of any run.

Every bench worker (local processes, or Ray tasks on this machine) appends the cost of each call it makes,
under an exclusive `flock`, and checks the file's total before each call (`BudgetTracker` with this ledger);
the driver checks it before starting a run. The file stays in the bench folder, so a resumed bench continues
with what is left of its `--budget-usd` (raise the limit to continue after it was spent). Ray tasks on other
machines see the file only when DIR is on a shared filesystem.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

from htam_graph.errors import BudgetExceeded
from htam_graph.model import Usage

__all__ = ["BUDGET_FILE", "BenchBudget", "FileLedger"]

BUDGET_FILE = "budget.jsonl"


class FileLedger:
    """The `SpendLedger` of one bench folder (see the module docstring). `run` labels this worker's lines."""

    def __init__(self, path: Path, run: str = "") -> None:
        self.path = path
        self.run = run

    def spent_usd(self) -> float:
        """The sum of every complete line (a line half-written by a killed worker is ignored)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return 0.0
        total = 0.0
        for line in text.splitlines(keepends=True):
            if not line.endswith("\n"):
                continue
            try:
                total += float(json.loads(line)["cost_usd"])
            except (ValueError, KeyError, TypeError):
                continue
        return total

    def record(self, usage: Usage) -> None:
        """Append one call's cost (atomic against the other workers: one locked, fsynced append)."""
        line = json.dumps(
            {
                "cost_usd": usage.cost_usd,
                "cost_known": usage.cost_known,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "run": self.run,
                "ms": int(time.time() * 1000),
            }
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


class BenchBudget:
    """The driver's side of `--budget-usd`: whether a new run may start, and what to report at the end."""

    def __init__(self, out_dir: Path, limit_usd: float | None) -> None:
        self.limit_usd = limit_usd
        self.ledger = FileLedger(out_dir / BUDGET_FILE)

    def may_start(self) -> bool:
        """False once the shared total has reached the limit (always True without a limit)."""
        return self.limit_usd is None or self.ledger.spent_usd() < self.limit_usd

    def summary(self, not_run: int, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The budget's state for the bench summary (None without a limit)."""
        if self.limit_usd is None:
            return None
        spent = self.ledger.spent_usd()
        stopped = sum(1 for r in rows if r.get("stopped_reason") == "budget")
        return {
            "limit_usd": self.limit_usd,
            "spent_usd": round(spent, 6),
            "exhausted": spent >= self.limit_usd,
            "runs_stopped": stopped,
            "runs_not_run": not_run,
        }

    def exhausted(self, not_run: int, rows: list[dict[str, Any]]) -> BudgetExceeded | None:
        """The error that ends a bench whose budget ran out before every run finished (None otherwise)."""
        info = self.summary(not_run, rows)
        if info is None or not info["exhausted"] or not (not_run or info["runs_stopped"]):
            return None
        return BudgetExceeded(
            f"bench budget of ${info['limit_usd']:.2f} spent (${info['spent_usd']:.4f} used): "
            f"{info['runs_stopped']} run(s) stopped early, {not_run} not run; the results and report are "
            "written; re-run with a larger --budget-usd to continue"
        )
