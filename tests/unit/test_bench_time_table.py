"""benchmarks/bench_time.py: the per-evaluation time table of a bench folder, from its run folders' records."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_time.py"
bench_time = runpy.run_path(str(SCRIPT))


def _eval(wall: float, queued: str, phases: str) -> dict[str, Any]:
    checks = {"phase_s": f"info: {phases}"}
    if queued:
        checks["queued_s"] = f"info: {queued}"
    return {"wall_s": wall, "checks": checks}


def _run(bench: Path, task: str, steps: list[dict[str, Any] | None], result: dict[str, Any] | None) -> None:
    folder = bench / "runs" / task.replace("/", "__") / "random" / "seed_0"
    folder.mkdir(parents=True)
    rows = [{"step": i + 1, "eval": e} for i, e in enumerate(steps)]
    (folder / "trajectory.json").write_text(json.dumps(rows), encoding="utf-8")
    if result is not None:
        row = {"task": task, "policy": "random", "seed": 0, **result}
        with (bench / "results.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    _run(tmp_path, "kb/level1/a", [
        _eval(30.0, "20.000 in 3 waits: memory 12.000, timing 8.000",
              "variants 0.5, correctness 4.0, correctness.trials 3.0, timing 5.0"),
        _eval(10.0, "", "variants 0.5, correctness 2.0, timing 3.0"),
        None,  # a step whose candidate never reached the evaluator
    ], {"wall_s": 50.0})  # fmt: skip
    _run(tmp_path, "kb/level1/b", [_eval(20.0, "4.000 in 1 waits", "correctness 6.0")],  # no split (older)
         {"wall_s": 100.0, "resumed_after_steps": 2})  # fmt: skip
    _run(tmp_path, "kb/level1/c", [_eval(5.0, "", "correctness 1.0")], None)  # cut mid-way
    # a task file whose name holds "__" (KernelBench's level1/50): its folder name does not map back by "/"
    _run(tmp_path, "kb/level1/d__square", [_eval(2.0, "", "correctness 1.0")], {"wall_s": 3.0})
    return tmp_path


def test_rows_come_from_every_evaluation_record(bench: Path) -> None:
    rows = bench_time["bench_rows"](bench)
    assert sorted(rows["wall"]) == [2.0, 5.0, 10.0, 20.0, 30.0]
    assert sorted(rows["queued"]) == [0.0, 0.0, 0.0, 4.0, 20.0]
    assert sorted(rows["wall - queued"]) == [2.0, 5.0, 10.0, 10.0, 16.0]
    assert rows["queued: memory"] == [12.0] and rows["queued: timing"] == [8.0]
    assert sorted(rows["phase: correctness"]) == [1.0, 1.0, 2.0, 4.0, 6.0]
    assert sorted(rows["phase: timing"]) == [3.0, 5.0]
    assert "phase: correctness.trials" not in rows  # a sub-phase is part of its phase
    # Runs a and d (finished, not resumed): 50 s of run wall with 40 s of evaluations, 3 s with 2 s.
    assert rows["run wall - evaluations"] == [10.0, 1.0]


def test_table_has_count_median_mean_and_sum(bench: Path) -> None:
    text = bench_time["table"](bench_time["bench_rows"](bench))
    assert "| wall | 5 | 10.0 | 13.4 | 67 |" in text
    assert "| queued | 5 | 0.0 | 4.8 | 24 |" in text
    assert "| run wall - evaluations | 2 | 5.5 | 5.5 | 11 |" in text


def test_a_folder_without_records_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_time["main"]([str(tmp_path)]) == 1
    assert "no evaluation records" in capsys.readouterr().out
