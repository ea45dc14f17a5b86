"""Robust-KBench folders through the CLI: `tasks import` (format detected), `bench --tasks PATH`, bad input."""

from __future__ import annotations

import json
import runpy
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from htam_graph.cli.main import _register, cli
from htam_graph.settings import Settings

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "robust_kbench"
_load = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]
small_sample = _load("robust_kbench_small").small_sample


@pytest.fixture(scope="module", autouse=True)
def _commands() -> None:
    _register()


def _invoke(settings: Settings, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli,
        ["--home", str(settings.htam_home), *args],
        env={"HTAM_GRAPH_NAME": settings.graph_name, "NEO4J_URI": ""},
    )
    return result.exit_code, result.output


def test_tasks_import_detects_robust_kbench_and_lists_the_task(htam_settings: Settings) -> None:
    code, out = _invoke(htam_settings, "tasks", "import", str(SAMPLE))
    assert code == 0, out
    assert out.splitlines()[0] == "imported 1, updated 0, unchanged 0, skipped 0"
    code, out = _invoke(htam_settings, "tasks", "import", str(SAMPLE / "layernorm"))
    assert code == 0 and out.startswith("imported 0, updated 0, unchanged 1"), out
    code, out = _invoke(htam_settings, "tasks", "list", "--json")
    rows = {r["key"]: r for r in json.loads(out)}
    assert rows["robust-kbench/layernorm"]["suite"] == "robust-kbench"
    assert rows["robust-kbench/layernorm"]["op_tags"] == ["norm"]


def test_malformed_folder_is_one_line_exit_1(htam_settings: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "layernorm"
    shutil.copytree(SAMPLE / "layernorm", folder)
    (folder / "config_forward.json").write_text('{"single_input_configs": 3}', encoding="utf-8")
    for command in (
        ["tasks", "import", str(folder)],
        ["bench", "--tasks", str(folder), "--out", str(tmp_path / "b")],
    ):
        code, out = _invoke(htam_settings, *command)
        assert code == 1, out
        assert out.strip().count("\n") == 0 and "Traceback" not in out
        assert "single_input_configs must be a non-empty list of objects" in out


def _one_smoke_step(tasks: Path) -> list[str]:
    """`bench` of the task folder: one rules step at smoke sizes on the CPU, rows as JSON."""
    return ["bench", "--tasks", str(tasks), "--steps", "1", "--device", "cpu", "--shape", "smoke", "--json"]


def test_bench_runs_a_robust_kbench_path(htam_settings: Settings, tmp_path: Path) -> None:
    """One rules step at smoke sizes on the CPU (the sample at test sizes): the task is imported, run, and its
    row and report written.
    (Whether a rules recipe applies is the rules library's business; the evaluator side is tested in
    test_tasks_robust_kbench_eval.py.)"""
    out_dir = tmp_path / "bench"
    code, out = _invoke(htam_settings, *_one_smoke_step(small_sample(tmp_path)), "--out", str(out_dir))
    assert code == 0, out
    rows = [json.loads(line) for line in (out_dir / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["task"], r["status"]) for r in rows] == [("robust-kbench/layernorm", "done")], rows
    assert json.loads((out_dir / "bench.json").read_text())["task_keys"] == ["robust-kbench/layernorm"]
    assert (out_dir / "report" / "report.md").is_file()


H200_BANK = (
    Path(__file__).resolve().parents[2] / "results/h200/bench_htam4_2026-11-30/memory_bank/htam_bank.jsonl.gz"
)


def _counts(settings: Settings) -> dict[str, int]:
    code, out = _invoke(settings, "memory", "show", "--json")
    assert code == 0, out
    shown = json.loads(out)
    return {**shown["labels"], **shown["relationships"]}


def test_transfer_study_on_the_h200_kernelbench_bank(htam_settings: Settings, tmp_path: Path) -> None:
    """The paper's cross-benchmark setting: the bank the H200 KernelBench bench learned (committed in results/),
    imported, then the Robust-KBench task (at test sizes) benched with --frozen-memory (the bank is read, never written) and
    then without (the run's attempts join the bank)."""
    code, out = _invoke(htam_settings, "memory", "import", str(H200_BANK))
    assert code == 0, out
    bank = _counts(htam_settings)
    assert bank["Attempt"] == 410 and bank["TRANSITION"] >= 70  # the bench's 410 attempts (+ seed priors)

    common = _one_smoke_step(small_sample(tmp_path / "tasks"))
    code, out = _invoke(htam_settings, *common, "--frozen-memory", "--out", str(tmp_path / "frozen"))
    assert code == 0, out
    (row,) = [json.loads(x) for x in (tmp_path / "frozen" / "results.jsonl").read_text().splitlines()]
    assert (row["task"], row["status"], len(row["trajectory"])) == ("robust-kbench/layernorm", "done", 1)
    # the bench of a Robust-KBench path (test_bench_runs_a_robust_kbench_path, slow tier, checks the same)
    assert json.loads((tmp_path / "frozen" / "bench.json").read_text())["task_keys"] == [
        "robust-kbench/layernorm"
    ]
    assert (tmp_path / "frozen" / "report" / "report.md").is_file()
    # frozen: no experience written (the task itself is registered, like `tasks import`)
    assert _counts(htam_settings) == {**bank, "Task": bank["Task"] + 1}

    code, out = _invoke(htam_settings, *common, "--out", str(tmp_path / "learning"))
    assert code == 0, out
    after = _counts(htam_settings)
    assert after["Attempt"] == bank["Attempt"] + 1 and after["Run"] == bank["Run"] + 1
