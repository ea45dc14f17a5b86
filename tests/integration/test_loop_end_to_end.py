"""`htam-graph run` end to end on the CPU: real embedded graph, real subprocess evaluator, real Triton kernels under
the interpreter, with the offline rules backend and with the replay (LLM) backend.

These are the slowest tests of the suite (each evaluation spawns a worker and interprets Triton), so they run
few steps on smoke shapes.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from htam_graph.cli.main import _register, cli
from htam_graph.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT / "tests" / "data" / "kernelbench"
CANDIDATES = ROOT / "tests" / "data" / "candidates"


def _invoke(settings: Settings, args: list[str], **extra_env: str | None) -> tuple[int, str, str]:
    _register()
    runner = CliRunner()
    env: dict[str, str | None] = {
        "HTAM_HOME": str(settings.htam_home),
        "HTAM_GRAPH_NAME": settings.graph_name,
        "NEO4J_URI": "",
        **extra_env,
    }
    res = runner.invoke(cli, args, env=env, catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


def _graph_counts(settings: Settings) -> dict[str, int]:
    from htam_graph import memory
    from htam_graph.store import store_session

    with store_session(settings) as store:
        return memory.memory_summary(store).labels | {
            f"rel:{k}": v for k, v in memory.memory_summary(store).relationships.items()
        }


def test_run_rules_on_elementwise_softmax_and_conv_epilogue(htam_settings: Settings, tmp_path: Path) -> None:
    tasks = [
        str(KB / "level1" / "20_LeakyReLU.py"),
        str(KB / "level1" / "24_LogSoftmax.py"),
        str(KB / "level2" / "54_Conv2d_Multiply_LeakyReLU_GELU.py"),
    ]
    out = tmp_path / "out"
    code, stdout, stderr = _invoke(
        htam_settings,
        [
            "run",
            *tasks,
            "--backend",
            "rules",
            "--device",
            "cpu",
            "--shape",
            "smoke",
            "--steps",
            "2",
            "--out",
            str(out),
            "--json",
        ],
    )
    assert code == 0, stderr
    summaries = json.loads(stdout)
    assert len(summaries) == 3
    for summary in summaries:
        folder = out / summary["task"].replace("/", "__")
        trajectory = json.loads((folder / "trajectory.json").read_text())
        assert len(trajectory) == 2
        # every candidate the rules wrote for these tasks is a correct Triton kernel
        assert all(step["status"] != "failed" for step in trajectory), trajectory
        assert all(step["eval"]["checks"] for step in trajectory)
        best = (folder / "best.py").read_text()
        assert "@triton.jit" in best and "class ModelNew" in best
        assert not summary["best_is_reference"]
        assert (folder / "candidates" / "step_1.py").is_file()
    counts = _graph_counts(htam_settings)
    assert counts["Attempt"] == 6 and counts["Run"] == 3
    assert counts["rel:FOLLOWS"] == 3  # two steps per run: one FOLLOWS each
    assert counts["rel:APPLIED"] == 6


def test_replay_drives_the_llm_path_through_the_real_evaluator(
    htam_settings: Settings, tmp_path: Path
) -> None:
    kernel = (CANDIDATES / "triton_leaky_relu.py").read_text()
    replay = tmp_path / "replay.jsonl"
    records = [
        {
            "match": {"step": 1},
            "reply": f"Here is a fused kernel.\n\n```python\n{kernel}\n```\nIt is faster.",
        },
        {"match": {"step": 2}, "reply": "I could not improve it further, sorry."},
    ]
    replay.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "out"
    code, stdout, stderr = _invoke(
        htam_settings,
        [
            "run",
            str(KB / "level1" / "20_LeakyReLU.py"),
            "--backend",
            f"replay:{replay}",
            "--device",
            "cpu",
            "--shape",
            "smoke",
            "--steps",
            "2",
            "--out",
            str(out),
            "--json",
        ],
    )
    assert code == 0, stderr
    trajectory = json.loads((out / "trajectory.json").read_text())
    assert trajectory[0]["status"] == "correct"  # correct; CPU timings never count as a speed-up
    assert trajectory[1]["status"] == "failed" and trajectory[1]["error_kind"] == "no_code"
    assert (out / "best.py").read_text() == (out / "candidates" / "step_1.py").read_text()
    counts = _graph_counts(htam_settings)
    assert counts["Attempt"] == 2


def test_unknown_task_and_missing_key_are_one_line_errors(htam_settings: Settings) -> None:
    code, _, stderr = _invoke(htam_settings, ["run", "kernelbench/level9/1_Nope", "--device", "cpu"])
    assert code == 1 and stderr.strip().count("\n") == 0 and "unknown task" in stderr
    code, _, stderr = _invoke(
        htam_settings,
        ["run", str(KB / "level1" / "20_LeakyReLU.py"), "--backend", "anthropic", "--device", "cpu"],
        ANTHROPIC_API_KEY=None,
    )
    assert code == 1 and "ANTHROPIC_API_KEY" in stderr and stderr.strip().count("\n") == 0
