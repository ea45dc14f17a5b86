"""`htam-graph eval` and `htam-graph baseline` through click's runner (real workers on the CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from htam_graph.cli.baseline import baseline
from htam_graph.cli.eval import EXIT_INCORRECT, eval_cmd
from htam_graph.kernels_runtime.parent.baseline import baseline_request, baseline_row
from htam_graph.kernels_runtime.parent.reference import reference_as_candidate
from htam_graph.model import EvalResult
from htam_graph.settings import Settings

DATA = Path(__file__).resolve().parents[1] / "data"

TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x)

batch_size = 4
dim = 4096

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
"""


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    task = tmp_path / "1_Tanh.py"
    task.write_text(TASK)
    good = tmp_path / "good.py"
    good.write_text((DATA / "candidates" / "triton_tanh.py").read_text())
    bad = tmp_path / "bad.py"
    bad.write_text((DATA / "adversarial" / "returns_zeros.py").read_text())
    ref = tmp_path / "ref.py"
    ref.write_text(reference_as_candidate(TASK))
    return {"task": task, "good": good, "bad": bad, "ref": ref}


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    return Settings(htam_home=tmp_path / "home")


def _root():
    from htam_graph.cli import main

    main._register()
    return main.cli


FAST = ["--device", "cpu", "--shape", "smoke", "--trials", "2", "--timing-runs", "3"]


def test_eval_correct_candidate_exits_0_and_prints_the_verdict(files, settings, monkeypatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    r = CliRunner().invoke(eval_cmd, [str(files["good"]), "--task", str(files["task"]), *FAST], obj=settings)
    assert r.exit_code == 0, r.output
    assert "CORRECT" in r.output and "kernel_launched" in r.output and "perf_counter" in r.output


def test_eval_incorrect_candidate_exits_3_with_json(files, settings, monkeypatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    r = CliRunner().invoke(
        eval_cmd, [str(files["bad"]), "--task", str(files["task"]), *FAST, "--json"], obj=settings
    )
    assert r.exit_code == EXIT_INCORRECT, r.output
    result = EvalResult.model_validate_json(r.output)
    assert result.error_kind is not None and result.error_kind.value == "mismatch"


def test_eval_reference_track(files, settings) -> None:
    r = CliRunner().invoke(
        eval_cmd, [str(files["ref"]), "--task", str(files["task"]), *FAST, "--reference"], obj=settings
    )
    assert r.exit_code == 0, r.output


def test_eval_cuda_without_cuda_is_one_line_exit_1(files, settings) -> None:
    cli = _root()

    r = CliRunner().invoke(
        cli,
        [
            "--home",
            str(settings.htam_home),
            "eval",
            str(files["good"]),
            "--task",
            str(files["task"]),
            "--device",
            "cuda",
        ],
    )
    assert r.exit_code == 1
    assert "no CUDA device" in r.output and len(r.output.strip().splitlines()) == 1


def test_eval_missing_task_file_is_exit_1(files, settings) -> None:
    cli = _root()

    r = CliRunner().invoke(
        cli, ["--home", str(settings.htam_home), "eval", str(files["good"]), "--task", "nope/missing.py"]
    )
    assert r.exit_code == 1 and "not found" in r.output


def test_baseline_refuses_on_cpu_unless_asked(files, settings) -> None:
    cli = _root()

    r = CliRunner().invoke(cli, ["--home", str(settings.htam_home), "baseline", str(files["task"])])
    assert r.exit_code == 1 and "--device cpu" in r.output


def test_baseline_on_cpu_without_store(files, settings) -> None:
    r = CliRunner().invoke(
        baseline,
        [
            str(files["task"]),
            "--device",
            "cpu",
            "--shape",
            "smoke",
            "--timing-runs",
            "3",
            "--no-store",
            "--json",
        ],
        obj=settings,
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    props = data["rows"][0]["props"]
    assert props["timing_on_cpu"] is True and props["eager_us"] > 0 and props["compile_us"] is None
    assert data["stored"] is False


def test_baseline_rows_round_trip_through_the_graph(store, files) -> None:
    from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator

    req = baseline_request("test/1_Tanh", TASK, "cpu", "smoke", timing_runs=3)
    result = SubprocessEvaluator().evaluate(req)
    row = baseline_row(req, result, now_ms=123)
    assert store.run("baseline_upsert", {"rows": [row]})[0]["written"] == 1
    assert store.run("baseline_upsert", {"rows": [row]})[0]["written"] == 1  # idempotent MERGE on key
    got = store.run("baseline_get", {"task_keys": ["test/1_Tanh"]})
    assert len(got) == 1 and got[0]["key"] == "test/1_Tanh|cpu|smoke|fp32-strict"
    assert got[0]["eager_us"] == pytest.approx(result.ref_eager_us) and got[0]["timing_on_cpu"] is True
