"""One run of the H200 LLM study (results/llm_study/study_2026-12-01), replayed end to end on the CPU from the
study's replay bank: the same directions and strategies are asked for, the model's recorded replies give
byte-identical candidates, and every step that was correct on the H200 is correct under the Triton
interpreter (on smoke shapes) while a step that failed there fails here too."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from click.testing import CliRunner

from htam_graph.cli.main import _register, cli
from htam_graph.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "results" / "llm_study" / "study_2026-12-01"
TASK = "kernelbench/level1/20_LeakyReLU"
RUN = "study/bench/runs/kernelbench__level1__20_LeakyReLU/htam/seed_0"
CORRECT = {"correct", "improved"}


def _recorded_run() -> tuple[list[dict[str, object]], dict[int, str]]:
    """The study's trajectory of the run and its candidates, from the committed study state."""
    with tarfile.open(STUDY / "state.tar.gz") as tar:
        trajectory = json.load(tar.extractfile(f"{RUN}/trajectory.json"))  # type: ignore[arg-type]
        candidates = {
            step["step"]: tar.extractfile(f"{RUN}/candidates/step_{step['step']}.py").read().decode()  # type: ignore[union-attr]
            for step in trajectory
        }
    return trajectory, candidates


def test_a_study_run_replays_on_the_cpu_as_it_ran_on_the_h200(
    htam_settings: Settings, tmp_path: Path
) -> None:
    records = [
        json.loads(line)
        for line in (STUDY / "replay_bank.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip() and json.loads(line)["match"]["task_key"] == TASK
    ]
    recorded, candidates = _recorded_run()
    assert len(records) == len(recorded) >= 3
    bank = tmp_path / "bank.jsonl"
    bank.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    out = tmp_path / "out"
    _register()
    result = CliRunner().invoke(
        cli,
        [
            "run", str(ROOT / "tests" / "data" / "kernelbench" / "level1" / "20_LeakyReLU.py"),
            "--backend", f"replay:{bank}", "--device", "cpu", "--shape", "smoke",
            "--steps", str(len(records)), "--out", str(out), "--json",
        ],
        env={"HTAM_HOME": str(htam_settings.htam_home), "HTAM_GRAPH_NAME": htam_settings.graph_name,
             "NEO4J_URI": ""},
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    replayed = json.loads((out / "trajectory.json").read_text(encoding="utf-8"))
    assert [s["step"] for s in replayed] == [s["step"] for s in recorded]
    for record, then, now in zip(records, recorded, replayed, strict=True):
        step = now["step"]
        assert now["global"] == then["global"] == record["match"]["direction"]
        assert now["probability"] == 1.0  # taken from the recording, not drawn
        assert now["generation"]["offered"][0] == then["generation"]["offered"][0]
        assert (out / "candidates" / f"step_{step}.py").read_text(encoding="utf-8") == candidates[step]
        assert (now["status"] in CORRECT) == (then["status"] in CORRECT), (step, now["error_excerpt"])
