"""The report's pure pieces: run derivation (reference / failed runs), geomean, cell formatting, Markdown."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from htam_graph.report import load, metrics
from htam_graph.report.render import md_table
from htam_graph.report.writer import _cell, fmt, warnings_for


def base(**kw: object) -> dict[str, object]:
    row: dict[str, object] = {"task": "t", "level": 1, "policy": "htam", "seed": 0, "status": "done"}
    row.update(kw)
    return row


def test_reference_run_is_1x_over_eager_and_eager_over_compile() -> None:
    d = load.derive_run(base(best_is_reference=True, ref_eager_us=200.0, ref_compile_us=100.0, sol_us=50.0))
    assert (d["speedup_eager_x"], d["speedup_compile_x"]) == (1.0, 0.5)
    assert d["runtime_us"] == 200.0 and d["sol_fraction"] == 0.25 and d["returned_correct"]
    assert math.isnan(d["best_step"])  # the reference is not a kernel found at some step


def test_failed_run_counts_1x_and_not_correct() -> None:
    d = load.derive_run(base(status="timeout"))
    assert d["speedup_eager_x"] == 1.0 and not d["returned_correct"]
    assert math.isnan(d["speedup_compile_x"])  # nothing measured: left out, not invented


def test_missing_recorded_speedup_falls_back_to_runtimes() -> None:
    d = load.derive_run(base(ref_eager_us=300.0, ref_compile_us=150.0, best_runtime_us=100.0))
    assert (d["speedup_eager_x"], d["speedup_compile_x"]) == (3.0, 1.5)


def test_done_run_without_any_speedup_is_an_error() -> None:
    with pytest.raises(load.ReportError, match="no usable speedup"):
        load.derive_run(base(best_speedup_eager_x=None))


def test_geomean_ignores_missing_values() -> None:
    assert metrics.geomean([2.0, 8.0, math.nan, None]) == pytest.approx(4.0)
    assert math.isnan(metrics.geomean([]))


def test_orders_and_labels() -> None:
    assert metrics.level_order(["all", "2", "10", "-", "1"]) == ["1", "2", "10", "-", "all"]
    assert metrics.policy_order(["random", "flat", "htam"]) == ["htam", "flat", "random"]
    assert load.level_label(None) == "-" and load.level_label(2) == "2"


def test_cells() -> None:
    assert fmt(math.nan, "x") == "-" and fmt(1.23456, "x") == "1.235x" and fmt(3.0, "int") == "3"
    assert _cell([1.0, 3.0], "frac", "mean") == f"2.000 ± {math.sqrt(2):.3f}"
    assert _cell([2.0, 2.0], "x", "mean") == "2.000x"
    assert _cell([1.0, 2.0], "usd", "sum") == "$3.00"


def test_markdown_table_escapes_pipes() -> None:
    text = md_table(pd.DataFrame({"a": ["x|y"], "b": [None]}))
    assert text.splitlines() == ["| a | b |", "|---|---|", "| x\\|y | - |"]


def _bench_of(*rows: dict[str, object]) -> load.Bench:
    runs = pd.DataFrame([load.derive_run(r) for r in rows])
    return load.Bench(path=None, name="b", config={}, runs=runs, steps=pd.DataFrame())  # type: ignore[arg-type]


def test_sol_warning_tells_a_work_reducing_rewrite_from_a_wrong_bound() -> None:
    def run(task: str, global_key: str) -> dict[str, object]:
        step = {"step": 1, "global": global_key, "local": f"{global_key}.x", "status": "improved"}
        return base(
            task=task,
            best_speedup_eager_x=5.0,
            best_runtime_us=100.0,
            sol_us=150.0,
            best_step=1,
            best_is_reference=False,
            trajectory=[step],
        )

    fast = base(
        task="ok", best_speedup_eager_x=2.0, best_runtime_us=100.0, sol_us=50.0, best_is_reference=False
    )
    assert not [w for w in warnings_for(_bench_of(fast)) if "speed-of-light" in w]
    rewrite = [
        w for w in warnings_for(_bench_of(fast, run("pooled", "algebraic_rewrite"))) if "speed-of-light" in w
    ]
    assert len(rewrite) == 1 and "algebraic rewrite" in rewrite[0] and "pooled" in rewrite[0]
    wrong = [w for w in warnings_for(_bench_of(run("fused", "fusion"))) if "speed-of-light" in w]
    assert len(wrong) == 1 and "estimate or the timing" in wrong[0]
