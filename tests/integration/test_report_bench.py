"""`htam-graph report` end to end on synthetic bench folders: every file is written and the numbers equal values
computed by hand here (geomean, median, fast_p, correct %, SOL, seeds mean ± std, trajectory tables)."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from htam_graph.cli.main import _register, cli
from htam_graph.report.load import load_bench
from htam_graph.report.metrics import best_by_step
from htam_graph.report.writer import write_report

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_bench"
A, B = "kernelbench/level1/1_A", "kernelbench/level1/2_B"
C, D = "kernelbench/level2/3_C", "kernelbench/level2/4_D"
TRAJ = [
    {"step": 1, "global": "fusion", "local": "fusion.elementwise_chain", "status": "improved",
     "speedup_x": 1.5, "best_speedup_x": 1.5, "gain": math.log(1.5)},
    {"step": 2, "global": "memory_access", "local": "memory_access.vectorized_loads", "status": "improved",
     "speedup_x": 2.0, "best_speedup_x": 2.0, "gain": math.log(2.0 / 1.5)},
    {"step": 3, "global": "fusion", "local": "fusion.elementwise_chain", "status": "failed",
     "error_kind": "compile_error", "speedup_x": None, "best_speedup_x": 2.0, "gain": 0.0},
]  # fmt: skip


def run(task: str, policy: str, seed: int, eager: float | None, compile_: float | None, runtime: float | None,
        *, status: str = "done", correct_steps: int = 1, sol: float | None = None, best_step: int | None = None,
        traj: list[dict[str, Any]] | None = None, cost: float = 0.0) -> dict[str, Any]:  # fmt: skip
    """One results.jsonl line; runtime None = the reference was returned."""
    reference = runtime is None
    return {
        "task": task, "level": int(task.split("/")[1][-1]), "op_tags": [], "policy": policy, "seed": seed,
        "status": status, "error": None if status == "done" else "boom",
        "backend": "rules", "model": "rules", "steps": 3, "device": "cuda", "shape": "default",
        "best_is_reference": reference, "best_step": best_step,
        "best_speedup_eager_x": None if status != "done" else (1.0 if reference else eager / runtime),
        "best_speedup_compile_x": None if status != "done" else (compile_ / (eager if reference else runtime)),
        "best_runtime_us": runtime, "ref_eager_us": eager, "ref_compile_us": compile_, "sol_us": sol,
        "gpu_name": "NVIDIA H200", "torch_version": "2.11.0+cu130", "timing_on_cpu": False,
        "rtol": 1e-4, "atol": 1e-4, "correct_steps": correct_steps, "compile_failures": 1 if traj else 0,
        "usage": {"input_tokens": 100, "output_tokens": 10, "cost_usd": cost, "cost_known": True},
        "wall_s": 1.0, "trajectory": traj or [],
    }  # fmt: skip


ROWS = [
    run(A, "htam", 0, 100, 75, 50, correct_steps=3, sol=25, best_step=2, traj=TRAJ, cost=0.5),
    run(B, "htam", 0, 200, 100, None, correct_steps=2, sol=50),
    run(C, "htam", 0, None, None, None, status="error", correct_steps=0),
    run(D, "htam", 0, 400, 200, 100, correct_steps=4, best_step=3),
    run(A, "htam", 1, 100, 75, 80, correct_steps=2, sol=25, best_step=1, traj=TRAJ, cost=0.25),
    run(B, "htam", 1, 200, 100, 125, best_step=2),
    run(C, "htam", 1, 300, 150, None, correct_steps=0),
    run(D, "htam", 1, 400, 200, 200, best_step=1),
    run(A, "random", 0, 100, 75, None),
    run(B, "random", 0, 200, 100, 160, best_step=1, traj=[{**TRAJ[2], "step": 1}]),
    run(C, "random", 0, None, None, None, status="timeout", correct_steps=0),
    run(D, "random", 0, 400, 200, 200, best_step=2),
]
CONFIG = {
    "format_version": 1, "backend": "rules", "model": "rules", "policies": ["htam", "random"], "steps": 3,
    "device": "cuda", "shape": "default", "seeds": [0, 1], "precision_policy": "fp32-strict", "dtype": "fp32",
    "rtol": 1e-4, "atol": 1e-4, "timing_method": "CUDA events, L2 flushed, median of 20 runs",
    "gpu_name": "NVIDIA H200", "torch_version": "2.11.0+cu130",
}  # fmt: skip


def make_bench(folder: Path, rows: list[dict[str, Any]] = ROWS, config: dict[str, Any] = CONFIG) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bench.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder


def records(path: Path) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text(encoding="utf-8")))


def row(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    found = [r for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(found) == 1, (match, found)
    return found[0]


@pytest.fixture
def bench_dir(tmp_path: Path) -> Path:
    return make_bench(tmp_path / "bench1")


def invoke(*args: str) -> Any:
    _register()
    return CliRunner().invoke(cli, list(args))


def test_report_writes_every_file(bench_dir: Path) -> None:
    result = invoke("report", str(bench_dir))
    assert result.exit_code == 0, result.output
    out = bench_dir / "report"
    for stem in ("summary", "seeds", "directions", "strategies", "transitions", "runs"):
        assert (out / f"{stem}.csv").stat().st_size > 0 and (out / f"{stem}.json").stat().st_size > 0
    pngs = ["speedup_distribution", "best_vs_step", "transition_heatmap", "sol_fraction"]
    for name in pngs:
        data = (out / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name
    assert not (out / "memory_transition_heatmap.png").exists()  # no exported bank in this folder
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") == len(pngs)
    assert "<table" in html and "fast_1 over torch.compile" in html and "NVIDIA H200" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//|[\w./-]+\.(png|css|js))""", html)
    assert "<script" not in html and "<link" not in html  # self-contained, no external asset
    md = (out / "report.md").read_text(encoding="utf-8")
    for text in (
        "rtol 0.0001, atol 0.0001",
        "CUDA events, L2 flushed",
        "rules / rules",
        "fp32 / fp32-strict",
    ):
        assert text in md and text in html
    assert "2 run(s) failed (error/timeout)" in md


def test_summary_numbers_equal_hand_computed_values(bench_dir: Path) -> None:
    write_report(bench_dir)
    summary = records(bench_dir / "report" / "summary.json")
    s0 = row(summary, policy="htam", seed=0, level="all")
    # eager speedups: A 2.0, B reference 1.0, C error 1.0, D 4.0
    assert s0["geomean_eager_x"] == pytest.approx(8 ** (1 / 4))
    assert s0["median_eager_x"] == pytest.approx(1.5)
    assert (s0["fast_0"], s0["fast_1"], s0["fast_1_5"], s0["fast_2"]) == (0.75, 0.5, 0.5, 0.25)
    # over torch.compile: A 75/50, B (reference) 100/200, C unmeasured (left out), D 200/100
    assert s0["geomean_compile_x"] == pytest.approx(1.5 ** (1 / 3))
    assert s0["median_compile_x"] == pytest.approx(1.5) and s0["compile_x_runs"] == 3
    assert s0["fast_1_compile"] == 0.5
    assert s0["correct_pct"] == pytest.approx(75.0)
    assert (s0["tasks"], s0["runs"], s0["failed_runs"]) == (4, 4, 1)
    assert s0["sol_fraction_median"] == pytest.approx((25 / 50 + 50 / 200) / 2) and s0["sol_runs"] == 2
    assert s0["steps_to_best_mean"] == pytest.approx(2.5)
    assert s0["cost_usd"] == pytest.approx(0.5) and s0["input_tokens"] == 400
    l1 = row(summary, policy="htam", seed=0, level="1")
    assert l1["geomean_eager_x"] == pytest.approx(math.sqrt(2.0)) and l1["fast_1"] == 0.5
    s1 = row(summary, policy="htam", seed=1, level="all")  # 1.25, 1.6, reference 1.0, 2.0
    assert s1["geomean_eager_x"] == pytest.approx(4.0 ** (1 / 4)) and s1["fast_1"] == 0.75
    rnd = row(summary, policy="random", seed=0, level="all")  # reference 1.0, 1.25, timeout 1.0, 2.0
    assert rnd["geomean_eager_x"] == pytest.approx(2.5 ** (1 / 4)) and rnd["fast_1"] == 0.5
    assert rnd["fast_0"] == 0.75  # the timed-out run returned nothing: not correct


def test_seeds_mean_and_sample_std(bench_dir: Path) -> None:
    write_report(bench_dir)
    seeds = records(bench_dir / "report" / "seeds.json")
    htam = row(seeds, policy="htam", level="all")
    g0, g1 = 8 ** (1 / 4), 4 ** (1 / 4)
    assert htam["seeds"] == 2
    assert htam["geomean_eager_x_mean"] == pytest.approx((g0 + g1) / 2)
    assert htam["geomean_eager_x_std"] == pytest.approx(abs(g0 - g1) / math.sqrt(2))
    assert htam["fast_1_mean"] == pytest.approx(0.625)
    assert htam["fast_1_std"] == pytest.approx(0.25 / math.sqrt(2))
    random_ = row(seeds, policy="random", level="all")
    assert random_["seeds"] == 1 and random_["fast_1_std"] is None  # one seed: no spread to report
    md = (bench_dir / "report" / "report.md").read_text(encoding="utf-8")
    assert f"| {(g0 + g1) / 2:.3f}x ± {abs(g0 - g1) / math.sqrt(2):.3f} |" in md
    assert "| metric | htam (2 seeds) | random |" in md  # policies side by side, HTAM first


def test_trajectory_tables(bench_dir: Path) -> None:
    write_report(bench_dir)
    out = bench_dir / "report"
    directions = records(out / "directions.json")
    fusion = row(directions, policy="htam", **{"global": "fusion"})
    assert (fusion["attempts"], fusion["improved"], fusion["success_rate"]) == (4, 2, 0.5)
    assert fusion["mean_gain"] == pytest.approx(2 * math.log(1.5) / 4)
    assert row(directions, policy="random", **{"global": "fusion"})["attempts"] == 1
    strategies = records(out / "strategies.json")
    vec = row(strategies, policy="htam", local="memory_access.vectorized_loads")
    assert vec["attempts"] == 2 and vec["mean_gain"] == pytest.approx(math.log(2.0 / 1.5))
    transitions = records(out / "transitions.json")
    assert row(transitions, policy="htam", src="fusion", dst="memory_access")["count"] == 2
    back = row(transitions, policy="htam", src="memory_access", dst="fusion")
    assert back["mean_gain"] == 0.0
    assert len([t for t in transitions if t["policy"] == "random"]) == 0  # a one-step trajectory has no pair


def test_best_by_step_curve(bench_dir: Path) -> None:
    curve = best_by_step(load_bench(bench_dir))
    htam = curve[curve["policy"] == "htam"].set_index("step")["geomean_best_x"]
    # 8 htam runs; two (A, seeds 0 and 1) follow TRAJ, the other six have no trajectory and stay at 1.0
    assert htam[0] == 1.0
    assert htam[1] == pytest.approx(1.5 ** (2 / 8))
    assert htam[3] == pytest.approx(2.0 ** (2 / 8))


def test_compare_two_folders(tmp_path: Path) -> None:
    first = make_bench(tmp_path / "first")
    second = make_bench(tmp_path / "second", [r for r in ROWS if r["policy"] == "random"])
    out = tmp_path / "cmp"
    result = invoke("report", str(first), str(second), "--out", str(out))
    assert result.exit_code == 0, result.output
    table = records(out / "compare.json")
    assert [(r["bench"], r["policy"]) for r in table] == [
        ("first", "htam"),
        ("first", "random"),
        ("second", "random"),
    ]
    assert row(table, bench="first", policy="htam")["fast_1"] == pytest.approx(0.625)
    assert row(table, bench="second", policy="random")["geomean_eager_x"] == pytest.approx(2.5 ** (1 / 4))
    assert (out / "compare.csv").exists() and "first" in (out / "compare.html").read_text(encoding="utf-8")


def test_sample_bench_report_includes_the_memory_heatmap(tmp_path: Path) -> None:
    folder = tmp_path / "sample"
    shutil.copytree(SAMPLE, folder, ignore=shutil.ignore_patterns("report", "__pycache__", "*.py"))
    html = write_report(folder)
    assert (folder / "report" / "memory_transition_heatmap.png").stat().st_size > 5000
    text = html.read_text(encoding="utf-8")
    assert "SYNTHETIC DATA" in text and text.count("data:image/png;base64,") == 5


@pytest.mark.parametrize("missing", ["results.jsonl", "bench.json"])
def test_missing_file_is_one_line_exit_1(bench_dir: Path, missing: str) -> None:
    (bench_dir / missing).unlink()
    result = invoke("report", str(bench_dir))
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0 and missing in result.output
    assert "Traceback" not in result.output


def test_bad_inputs_are_one_line_exit_1(tmp_path: Path) -> None:
    result = invoke("report", str(tmp_path / "nope"))
    assert result.exit_code == 1 and "not a bench folder" in result.output
    bad = make_bench(tmp_path / "bad")
    (bad / "results.jsonl").write_text('{"task": "x", "policy": "p", "seed": 0, "status": "done"}\n{oops\n')
    result = invoke("report", str(bad))
    assert result.exit_code == 1 and "results.jsonl:2: not valid JSON" in result.output
    (bad / "results.jsonl").write_text("")
    result = invoke("report", str(bad))
    assert result.exit_code == 1 and "holds no finished run" in result.output


def _traj(*bests: float) -> list[dict[str, Any]]:
    """A trajectory whose best-so-far after step k is bests[k-1] (improved when it rises, else correct)."""
    rows, before = [], 1.0
    for k, best in enumerate(bests, start=1):
        rows.append({"step": k, "global": "fusion", "local": "fusion.elementwise_chain",
                     "status": "improved" if best > before else "correct", "speedup_x": best,
                     "best_speedup_x": best, "gain": math.log(best / before)})  # fmt: skip
        before = best
    return rows


def test_compare_steps_levels_and_who_reaches_the_best_first(tmp_path: Path) -> None:
    alpha = make_bench(tmp_path / "alpha", [
        run(A, "htam", 0, 100, 75, 50, best_step=2, traj=_traj(1.5, 2.0, 2.0)),
        run(B, "htam", 0, 300, 100, 100, best_step=3, traj=_traj(1.2, 1.2, 3.0)),
        run(C, "htam", 0, 400, 200, 100, best_step=1, traj=_traj(4.0)),  # only alpha has C: not compared
        run(D, "htam", 0, 400, 200, None),
    ])  # fmt: skip
    beta = make_bench(tmp_path / "beta", [
        run(A, "random", 0, 100, 75, 100 / 1.98, best_step=2, traj=_traj(1.0, 1.98, 1.98)),
        run(B, "random", 0, 300, 100, 100, best_step=1, traj=_traj(3.0, 3.0, 3.0)),
        run(D, "random", 0, 400, 200, None),
    ])  # fmt: skip
    out = tmp_path / "cmp"
    result = invoke("report", str(alpha), str(beta), "--out", str(out))
    assert result.exit_code == 0, result.output

    levels = records(out / "compare_levels.json")
    assert {(r["bench"], r["level"]) for r in levels} == {
        (b, lv) for b in ("alpha", "beta") for lv in ("1", "2")
    }
    assert row(levels, bench="alpha", level="1")["geomean_eager_x"] == pytest.approx(math.sqrt(2.0 * 3.0))
    assert row(levels, bench="beta", level="2")["tasks"] == 1  # D only

    # best by step over the three shared runs (A, B, D; D stays at the reference's 1.0)
    steps = records(out / "compare_steps.json")
    curve = {(r["arm"], r["step"]): r["geomean_best_x"] for r in steps}
    assert curve[("alpha / htam", 0)] == curve[("beta / random", 0)] == 1.0
    assert curve[("alpha / htam", 1)] == pytest.approx((1.5 * 1.2) ** (1 / 3))
    assert curve[("alpha / htam", 3)] == pytest.approx(6.0 ** (1 / 3))
    assert curve[("beta / random", 1)] == pytest.approx(3.0 ** (1 / 3))
    assert curve[("beta / random", 2)] == pytest.approx((1.98 * 3.0) ** (1 / 3))

    # A: shared best 2.0, both within 2 % at step 2 (1.98 >= 2/1.02): a tie; B: best 3.0, beta at step 1 and
    # alpha at step 3; D: nobody beat eager, left out
    reach = {r["arm"]: r for r in records(out / "compare_reach.json")}
    assert reach["alpha / htam"] == {"arm": "alpha / htam", "runs_compared": 2, "reached_best": 2,
                                     "first_alone": 0, "tied_first": 1,
                                     "mean_steps_to_best_when_all_reach": 2.5}  # fmt: skip
    assert reach["beta / random"]["first_alone"] == 1 and reach["beta / random"]["tied_first"] == 1
    assert reach["beta / random"]["mean_steps_to_best_when_all_reach"] == 1.5
    assert (out / "compare_best_vs_step.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "compare.md").read_text(encoding="utf-8")
    assert "geomean over the 3 shared runs" in md and "level 2, precision policy fp32-strict" in md


def test_compare_of_arms_with_different_runs_adds_the_shared_table_and_the_differences(
    tmp_path: Path,
) -> None:
    """A bench cut part-way beside a finished one: the overall tables stay over each arm's own runs (with a
    warning), compare_shared.* is over the runs both have, and compare_tasks.* lists the shared runs whose
    returned kernels differ by more than 20 %, with the step and strategy each came from."""
    alpha = make_bench(tmp_path / "alpha", [
        run(A, "htam", 0, 100, 75, 50, best_step=2, traj=TRAJ),  # 2.0x from step 2 (vectorized loads)
        run(B, "htam", 0, 300, 100, 100, best_step=3, traj=_traj(1.2, 1.2, 3.0)),  # 3.0x
        run(C, "htam", 0, 400, 200, 100, best_step=1, traj=_traj(4.0)),  # only alpha has C
        run(D, "htam", 0, 400, 200, None),  # the reference
    ])  # fmt: skip
    beta = make_bench(tmp_path / "beta", [
        run(A, "random", 0, 100, 75, 100 / 1.1, best_step=1, traj=_traj(1.1)),  # 1.1x: 2.0 / 1.1 > 1.2
        run(B, "random", 0, 300, 100, 110, best_step=1, traj=_traj(300 / 110)),  # 2.73x: within 20 % of 3.0
        run(D, "random", 0, None, None, None, status="error", correct_steps=0),  # failed: eager is kept
    ])  # fmt: skip
    out = tmp_path / "cmp"
    result = invoke("report", str(alpha), str(beta), "--out", str(out))
    assert result.exit_code == 0, result.output

    overall = {r["bench"]: r for r in records(out / "compare.json")}
    assert overall["alpha"]["tasks"] == 4 and overall["beta"]["tasks"] == 3
    shared = {r["bench"]: r for r in records(out / "compare_shared.json")}
    assert shared["alpha"]["tasks"] == shared["beta"]["tasks"] == 3
    assert shared["alpha"]["geomean_eager_x"] == pytest.approx((2.0 * 3.0 * 1.0) ** (1 / 3))
    assert shared["beta"]["geomean_eager_x"] == pytest.approx((1.1 * 300 / 110 * 1.0) ** (1 / 3))

    differences = records(out / "compare_tasks.json")
    assert [(r["task"], r["seed"]) for r in differences] == [(A, 0)]
    (only,) = differences
    assert only["ratio"] == pytest.approx(2.0 / 1.1)
    assert only["alpha / htam"] == pytest.approx(2.0) and only["beta / random"] == pytest.approx(1.1)
    assert only["alpha / htam: from"] == "step 2: memory_access.vectorized_loads"
    assert only["beta / random: from"] == "step 1: fusion.elementwise_chain"

    md = (out / "compare.md").read_text(encoding="utf-8")
    assert "the arms ran different runs (alpha / htam: 4, beta / random: 3)" in md
    assert "all levels, on the 3 runs every arm has" in md and "(1 of 3;" in md


def test_compare_of_arms_with_the_same_runs_has_no_shared_table(tmp_path: Path) -> None:
    rows = [r for r in ROWS if r["policy"] == "random"]
    first, second = make_bench(tmp_path / "first", rows), make_bench(tmp_path / "second", rows)
    out = tmp_path / "cmp"
    result = invoke("report", str(first), str(second), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert not (out / "compare_shared.json").exists()
    assert records(out / "compare_tasks.json") == []  # the same kernels: no difference
    assert "the arms ran different runs" not in (out / "compare.md").read_text(encoding="utf-8")


def test_reach_counts_an_arm_that_never_gets_there() -> None:
    from htam_graph.report.metrics import reach_table

    arms = {"x": {("t", 0): [1.0, 1.2, 1.2], ("u", 0): [1.0, 1.0, 1.0]},
            "y": {("t", 0): [1.0, 1.0, 1.1], ("u", 0): [1.0, 1.0, 1.0], ("only_y", 0): [1.0, 5.0, 5.0]}}  # fmt: skip
    table = {r["arm"]: r for r in reach_table(arms).to_dict("records")}
    assert table["x"]["runs_compared"] == 1  # t only: u never beat eager, only_y is not shared
    assert (table["x"]["reached_best"], table["x"]["first_alone"]) == (1, 1)
    assert (table["y"]["reached_best"], table["y"]["first_alone"]) == (0, 0)
    assert math.isnan(table["x"]["mean_steps_to_best_when_all_reach"])  # y never reached it


def test_report_reads_a_gzipped_bank_kept_in_memory_bank(tmp_path: Path) -> None:
    import gzip

    folder = tmp_path / "kept"
    shutil.copytree(SAMPLE, folder, ignore=shutil.ignore_patterns("report", "__pycache__", "*.py", "memory"))
    (folder / "memory_bank").mkdir()
    plain = SAMPLE / "memory" / "bank.jsonl"
    (folder / "memory_bank" / "b.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
    manifest = json.loads((SAMPLE / "memory" / "bank.jsonl.manifest.json").read_text(encoding="utf-8"))
    (folder / "memory_bank" / "b.jsonl.gz.manifest.json").write_text(
        json.dumps({**manifest, "jsonl": "b.jsonl.gz"})
    )
    write_report(folder)
    assert (folder / "report" / "memory_transition_heatmap.png").stat().st_size > 5000
