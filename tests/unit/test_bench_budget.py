"""The bench's shared dollar budget: the file ledger, trackers sharing it, and the driver's stop rule."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from htam_graph.bench.budget import BUDGET_FILE, BenchBudget, FileLedger
from htam_graph.bench.engine import ResultsLog, drive
from htam_graph.errors import BudgetExceeded
from htam_graph.llm.budget import BudgetTracker
from htam_graph.model import Usage


def _spend(path: str, n: int) -> None:
    ledger = FileLedger(Path(path), "child")
    for _ in range(n):
        ledger.record(Usage(input_tokens=10, cost_usd=0.25))


def test_ledger_sums_complete_lines_from_several_processes(tmp_path: Path) -> None:
    path = tmp_path / BUDGET_FILE
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_spend, args=(str(path), 20)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert FileLedger(path).spent_usd() == pytest.approx(3 * 20 * 0.25)
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"cost_usd": 100.0')  # a worker killed mid-line: not counted
    assert FileLedger(path).spent_usd() == pytest.approx(15.0)


def test_trackers_sharing_a_ledger_share_one_limit(tmp_path: Path) -> None:
    path = tmp_path / BUDGET_FILE
    a = BudgetTracker(5.0, FileLedger(path, "a"))
    b = BudgetTracker(5.0, FileLedger(path, "b"))
    a.add(Usage(cost_usd=3.0))
    b.check()  # 3 < 5: b may still call
    b.add(Usage(cost_usd=2.5))
    for tracker in (a, b):
        with pytest.raises(BudgetExceeded, match=r"shared budget of \$5\.00 spent \(\$5\.5000 used\)"):
            tracker.check()
    assert a.totals().cost_usd == 3.0 and b.totals().cost_usd == 2.5  # each run's own usage stays its own
    assert a.remaining_usd == 0.0
    # a resumed bench reads what is already spent
    assert BudgetTracker(8.0, FileLedger(path)).remaining_usd == pytest.approx(2.5)


def test_tracker_without_ledger_is_unchanged() -> None:
    tracker = BudgetTracker(1.0)
    tracker.add(Usage(cost_usd=0.6))
    tracker.check()
    tracker.add(Usage(cost_usd=0.6))
    with pytest.raises(BudgetExceeded, match=r"^budget of \$1\.00 spent"):
        tracker.check()


class _Executor:
    """Runs each job on the next wait; each run costs `cost` (written to the ledger) and returns `status`."""

    def __init__(self, ledger: FileLedger, statuses: list[str]) -> None:
        self.ledger, self.statuses = ledger, statuses
        self.running: list[int] = []
        self.started = 0

    @property
    def in_flight(self) -> int:
        return len(self.running)

    def submit(self, job: Any) -> None:
        self.running.append(job)
        self.started += 1

    def wait(self, timeout_s: float) -> list[dict[str, Any]]:
        if not self.running:
            return []
        job = self.running.pop(0)
        self.ledger.record(Usage(cost_usd=1.0))
        return [{"task": f"t{job}", "policy": "htam", "seed": 0, "status": self.statuses[job]}]

    def shutdown(self) -> None:
        pass


def test_drive_starts_no_run_once_the_budget_is_spent(tmp_path: Path) -> None:
    budget = BenchBudget(tmp_path, 2.0)
    ex = _Executor(budget.ledger, ["done", "done", "done", "done"])
    results = ResultsLog(tmp_path / "results.jsonl")
    not_run = drive(ex, [0, 1, 2, 3], results, max_in_flight=1, may_start=budget.may_start)  # type: ignore[list-item]
    assert ex.started == 2 and not_run == 2 and len(results.rows) == 2
    info = budget.summary(not_run, results.rows)
    assert info == {
        "limit_usd": 2.0,
        "spent_usd": 2.0,
        "exhausted": True,
        "runs_stopped": 0,
        "runs_not_run": 2,
    }
    error = budget.exhausted(not_run, results.rows)
    assert error is not None and "2 not run" in str(error) and "larger --budget-usd" in str(error)


def test_a_run_stopped_before_its_first_step_is_not_recorded(tmp_path: Path) -> None:
    budget = BenchBudget(tmp_path, 10.0)
    ex = _Executor(budget.ledger, ["done", "budget"])
    results = ResultsLog(tmp_path / "results.jsonl")
    assert drive(ex, [0, 1], results, max_in_flight=2, may_start=budget.may_start) == 1  # type: ignore[list-item]
    assert [r["task"] for r in results.rows] == ["t0"]  # a resume runs t1 again


def test_no_limit_never_stops(tmp_path: Path) -> None:
    budget = BenchBudget(tmp_path, None)
    budget.ledger.record(Usage(cost_usd=1e6))
    assert budget.may_start() and budget.summary(0, []) is None and budget.exhausted(0, []) is None
