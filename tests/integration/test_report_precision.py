"""Reports never pool precision tracks: tf32 results are split from fp32-strict ones and say so (synthetic
bench folders; the numbers are made up for the test and only their grouping is checked)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from htam_graph.report.compare import write_compare
from htam_graph.report.load import load_bench
from htam_graph.report.metrics import seed_table, summary_table
from htam_graph.report.writer import write_report


def result(task: str, eager: float, runtime: float, precision: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "task": task, "level": 2, "policy": "htam", "seed": 0, "status": "done", "best_is_reference": False,
        "best_step": 1, "best_speedup_eager_x": eager / runtime, "best_speedup_compile_x": None,
        "best_runtime_us": runtime, "ref_eager_us": eager, "ref_compile_us": None, "gpu_name": "NVIDIA H200",
        "torch_version": "2.11.0", "timing_on_cpu": False, "correct_steps": 1, "trajectory": [],
    }  # fmt: skip
    if precision is not None:
        row["precision_policy"] = precision
    return row


def bench(folder: Path, rows: list[dict[str, Any]], precision: str) -> Path:
    folder.mkdir(parents=True)
    config = {
        "backend": "rules",
        "precision_policy": precision,
        "rtol": 1e-4,
        "atol": 1e-4,
        "synthetic": True,
    }
    (folder / "bench.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    # two tasks; on the tf32 track both are 4x faster, on fp32-strict 1.25x: pooled they would average out
    rows = [result("kb/a", 100, 80, None), result("kb/b", 100, 80, None)]  # the bench's policy: fp32-strict
    rows += [result("kb/a", 100, 25, "tf32"), result("kb/b", 100, 25, "tf32")]
    return bench(tmp_path / "mixed", rows, "fp32-strict")


def test_summary_rows_are_split_by_precision_policy(mixed: Path) -> None:
    runs = load_bench(mixed).runs
    assert sorted(runs["precision_policy"]) == ["fp32-strict", "fp32-strict", "tf32", "tf32"]
    summary = summary_table(runs)
    overall = summary[summary["level"] == "all"].set_index("precision_policy")
    assert overall.loc["fp32-strict", "geomean_eager_x"] == pytest.approx(1.25)
    assert overall.loc["tf32", "geomean_eager_x"] == pytest.approx(4.0)
    assert overall.loc["tf32", "runs"] == 2 and overall.loc["fp32-strict", "runs"] == 2
    assert set(seed_table(summary)["precision_policy"]) == {"fp32-strict", "tf32"}


def test_report_labels_each_track(mixed: Path) -> None:
    md = (write_report(mixed).parent / "report.md").read_text(encoding="utf-8")
    assert "htam [fp32-strict]" in md and "htam [tf32]" in md
    assert "PRECISION TRACK tf32" in md and "tables are split by them" in md
    assert "fp32-strict, tf32" in md  # the header states both policies


def test_compare_keeps_tracks_apart(tmp_path: Path) -> None:
    strict = bench(tmp_path / "strict", [result("kb/a", 100, 80, "fp32-strict")], "fp32-strict")
    relaxed = bench(tmp_path / "relaxed", [result("kb/a", 100, 25, "tf32")], "tf32")
    out = tmp_path / "cmp"
    write_compare([relaxed, strict], out)
    table = json.loads((out / "compare.json").read_text(encoding="utf-8"))
    assert {(r["bench"], r["precision_policy"]) for r in table} == {
        ("strict", "fp32-strict"),
        ("relaxed", "tf32"),
    }
    md = (out / "compare.md").read_text(encoding="utf-8")
    strict_at, tf32_at = md.index("precision policy fp32-strict"), md.index("precision policy tf32")
    assert strict_at < tf32_at  # separate sections, the strict track first
    assert "relaxed" in md[tf32_at:] and "relaxed" not in md[strict_at:tf32_at]
    assert "PRECISION TRACK tf32" in md
