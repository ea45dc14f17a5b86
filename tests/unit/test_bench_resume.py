"""Reading a cut run's steps back from its folder (htam_graph/bench/resume.py) and keeping them for the restarted job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from htam_graph.bench.executors import _clear_run_dir
from htam_graph.bench.resume import load_resume
from htam_graph.bench.runfiles import RunFiles
from htam_graph.model import ErrorKind, EvalResult, Usage
from htam_graph.runtypes import StepOutcome

RUN = "run-0123456789ab"


def _step(k: int, status: str = "correct", source: str | None = "class ModelNew: pass\n") -> StepOutcome:
    evaluation = None
    if source is not None:
        evaluation = EvalResult(
            compiled=status != "failed",
            correct=status != "failed",
            error_kind=ErrorKind.COMPILE_ERROR if status == "failed" else None,
            runtime_us=50.0 * k,
            ref_eager_us=100.0,
            ref_compile_us=80.0,
            speedup_eager_x=2.0 / k,
            gpu_name="NVIDIA H200",
            gpu_arch="sm_90",
            checks={"phase_s": "info: timing 0.5"},
        )
    return StepOutcome(
        step=k,
        global_key="fusion",
        local_key="fusion.elementwise_chain",
        direction_probability=0.25,
        status=status,  # type: ignore[arg-type]
        error_kind=ErrorKind.COMPILE_ERROR if status == "failed" else (None if source else ErrorKind.NO_CODE),
        error_excerpt="",
        speedup_x=2.0 / k if status != "failed" else None,
        best_speedup_x=2.0,
        gain=0.5 if status == "improved" else 0.0,
        source=None if source is None else f"# step {k}\n{source}",
        result=evaluation,
        usage=Usage(input_tokens=10 * k),
        attempt_key=f"{RUN}-s{k}",
    )


def _written(tmp_path: Path, steps: list[StepOutcome]) -> Path:
    files = RunFiles(tmp_path, "kernelbench/level1/20_LeakyReLU", multi=False)
    for s in steps:
        files.step(s)
    return tmp_path


def test_the_steps_read_back_exactly(tmp_path: Path) -> None:
    steps = [_step(1, "improved"), _step(2, "failed"), _step(3, source=None)]
    resumed = load_resume(_written(tmp_path, steps), steps=6)
    assert resumed is not None
    resume, rows = resumed
    assert resume.run_key == RUN and resume.steps == tuple(steps)
    assert rows == json.loads((tmp_path / "trajectory.json").read_text(encoding="utf-8"))


def test_only_the_configured_number_of_steps_is_resumed(tmp_path: Path) -> None:
    steps = [_step(1), _step(2), _step(3)]
    resumed = load_resume(_written(tmp_path, steps), steps=2)
    assert resumed is not None and [s.step for s in resumed[0].steps] == [1, 2] and len(resumed[1]) == 2


def test_a_folder_without_steps_starts_fresh(tmp_path: Path) -> None:
    assert load_resume(tmp_path, steps=6) is None
    (tmp_path / "trajectory.json").write_text("[]", encoding="utf-8")
    assert load_resume(tmp_path, steps=6) is None


@pytest.mark.parametrize("damage", ["missing_candidate", "bad_json", "renumbered", "other_run", "bad_eval"])
def test_files_that_do_not_read_back_exactly_start_fresh(tmp_path: Path, damage: str) -> None:
    run_dir = _written(tmp_path, [_step(1, "improved"), _step(2)])
    path = run_dir / "trajectory.json"
    rows = json.loads(path.read_text(encoding="utf-8"))
    if damage == "missing_candidate":
        (run_dir / "candidates" / "step_2.py").unlink()
    elif damage == "bad_json":
        path.write_text(path.read_text(encoding="utf-8")[:-20], encoding="utf-8")
    else:
        if damage == "renumbered":
            rows[1]["step"] = 3
        elif damage == "other_run":
            rows[1]["attempt_key"] = "run-ffffffffffff-s2"
        else:
            rows[1]["eval"]["runtime_us"] = "fast"
        path.write_text(json.dumps(rows), encoding="utf-8")
    assert load_resume(run_dir, steps=6) is None


def test_a_restarted_job_keeps_only_its_trajectory_and_candidates(tmp_path: Path) -> None:
    run_dir = _written(tmp_path / "run", [_step(1)])
    (run_dir / "worker.log").write_text("old log", encoding="utf-8")
    (run_dir / ".row.json").write_text("{}", encoding="utf-8")
    (run_dir / "best.py").write_text("old best", encoding="utf-8")
    (run_dir / "scratch").mkdir()
    _clear_run_dir(run_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == ["candidates", "trajectory.json"]
    assert load_resume(run_dir, steps=6) is not None
    _clear_run_dir(tmp_path / "fresh")  # a job's first start creates its folder
    assert (tmp_path / "fresh").is_dir()
