"""Replies that come later, through the real CLI, store and folders: `--backend files` and a replay file that
lacks a request stop the run `awaiting_reply` at that step; the same command, once the reply is saved, goes on
at exactly that step, and the run's trajectory is the one an uninterrupted run produces.

The replies carry no code (evaluating a kernel under the CPU interpreter takes tens of seconds; the kernels'
path is covered with an evaluator double in test_loop_pending.py), so each invocation costs seconds. Each run
uses a graph of its own, so that both see the same memory.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from htam_graph.cli.main import _register, cli
from htam_graph.settings import Settings
from htam_graph.store.embedded import ServerInfo
from htam_graph.store.falkordb_store import FalkorDBStore

SUITE = Path(__file__).resolve().parents[1] / "data" / "bench_suite" / "kernelbench"
TASK = str(SUITE / "level1" / "20_LeakyReLU.py")
KEY = "kernelbench/level1/20_LeakyReLU"
# No code, so nothing is evaluated; the strategy lines make the crediting part of what must match.
REPLIES = [
    "STRATEGY: none\nI would fuse the ops, but here is no code.",
    "<think>STRATEGY: ignored.key</think>\nstrategy: memory_access.vectorized_loads\nStill no code, sorry.",
    "**Strategy:** `no.such.key`\nNothing.",
]
# What must be the same between an uninterrupted run and one stopped and resumed at every step.
SAME = ("step", "global", "local", "probability", "status", "error_kind", "error_excerpt", "gain")
SAME_GENERATION = ("offered", "named", "chosen", "extraction", "finish_reason", "truncated", "infra_error")


@pytest.fixture
def graphs(embedded_server: ServerInfo) -> Iterator[Callable[[], Settings]]:
    """Fresh graphs on the session's embedded server (each run its own memory); deleted afterwards."""
    made: list[Settings] = []

    def fresh() -> Settings:
        settings = Settings(htam_home=embedded_server.home, graph_name=f"defer_{uuid.uuid4().hex[:12]}")
        made.append(settings)
        return settings

    yield fresh
    for settings in made:
        store = FalkorDBStore(embedded_server.socket_path, settings.graph_name)
        store.delete_graph()
        store.close()


def invoke(settings: Settings, args: list[str]) -> tuple[int, str, str]:
    _register()
    env = {"HTAM_HOME": str(settings.htam_home), "HTAM_GRAPH_NAME": settings.graph_name, "NEO4J_URI": ""}
    res = CliRunner().invoke(cli, args, env=env, catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


def run_args(backend: str, out: Path, steps: int = 3) -> list[str]:
    return [
        "run", TASK, "--backend", backend, "--device", "cpu", "--shape", "smoke", "--steps", str(steps),
        "--out", str(out), "--json",
    ]  # fmt: skip


def write_replay(path: Path, replies: list[str]) -> None:
    records = [{"match": {"task_key": KEY, "step": n}, "reply": r} for n, r in enumerate(replies, start=1)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def same_fields(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**{k: r[k] for k in SAME}, **{k: r["generation"][k] for k in SAME_GENERATION}} for r in rows]


def trajectory(out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((out / "trajectory.json").read_text(encoding="utf-8"))
    return rows


def test_files_stop_and_resume_at_each_pending_step_as_an_uninterrupted_run(
    graphs: Callable[[], Settings], tmp_path: Path
) -> None:
    full = tmp_path / "full.jsonl"
    write_replay(full, REPLIES)
    code, stdout, stderr = invoke(graphs(), run_args(f"replay:{full}", tmp_path / "whole"))
    assert code == 0, stderr
    whole = trajectory(tmp_path / "whole")
    assert [r["step"] for r in whole] == [1, 2, 3] and json.loads(stdout)["stopped_reason"] == "3 steps done"

    settings, out = graphs(), tmp_path / "later"
    requests: dict[int, str] = {}
    for step in (1, 2, 3):
        code, stdout, stderr = invoke(settings, run_args("files", out))
        assert code == 0, stderr
        summary = json.loads(stdout)
        assert summary["stopped_reason"] == "awaiting_reply" and summary["awaiting_step"] == step
        pending = out / "pending"
        reply = pending / f"step_{step}.reply.md"
        assert summary["awaiting_reply"] == str(reply)
        # one line telling what to do, last on stderr; no traceback
        last = stderr.strip().splitlines()[-1]
        assert last == (
            f"awaiting a reply: answer {pending / f'step_{step}.request.md'} in {reply}, "
            "then run the same command again"
        )
        assert "Traceback" not in stderr
        assert sorted(p.name for p in pending.iterdir()) == [
            f"step_{step}.request.json",
            f"step_{step}.request.md",
        ]
        request = (pending / f"step_{step}.request.md").read_text(encoding="utf-8")
        assert "<system>" in request and "<user>" in request and KEY in request
        assert len(trajectory(out)) == step - 1  # nothing of the awaited step is recorded yet
        assert not (out / "best.py").exists()
        requests[step] = request
        reply.write_text(REPLIES[step - 1], encoding="utf-8")
    code, stdout, stderr = invoke(settings, run_args("files", out))
    assert code == 0, stderr
    assert json.loads(stdout)["stopped_reason"] == "3 steps done" and (out / "best.py").exists()
    assert not (out / "pending").exists()  # every pending file was used and removed
    later = trajectory(out)
    assert same_fields(later) == same_fields(whole)
    assert [r["generation"]["chosen"] for r in later] == ["none", "memory_access.vectorized_loads", "unknown"]
    assert len({r["attempt_key"].rsplit("-s", 1)[0] for r in later}) == 1  # one run, resumed twice
    for step in (1, 2, 3):
        saved = (out / "candidates" / f"step_{step}.reply.md").read_text(encoding="utf-8")
        assert saved == REPLIES[step - 1]
        # the exchange stays whole: the request text is kept beside the reply
        kept = (out / "candidates" / f"step_{step}.request.md").read_text(encoding="utf-8")
        assert kept == requests[step]


def test_a_replay_file_lacking_a_request_stops_and_resumes_once_the_reply_is_added(
    graphs: Callable[[], Settings], tmp_path: Path
) -> None:
    settings, out, replay = graphs(), tmp_path / "out", tmp_path / "bank.jsonl"
    write_replay(replay, REPLIES[:1])
    code, stdout, stderr = invoke(settings, run_args(f"replay:{replay}", out, steps=2))
    assert code == 0, stderr
    assert json.loads(stdout)["awaiting_step"] == 2 and len(trajectory(out)) == 1
    write_replay(replay, REPLIES[:2])  # the reply added to the file
    code, stdout, stderr = invoke(settings, run_args(f"replay:{replay}", out, steps=2))
    assert code == 0, stderr
    assert json.loads(stdout)["stopped_reason"] == "2 steps done"
    rows = trajectory(out)
    assert [r["generation"]["named"] for r in rows] == ["none", "memory_access.vectorized_loads"]
    assert rows[1]["generation"]["model"].startswith("replay:")


def test_resuming_with_another_configuration_is_refused_in_one_line(
    graphs: Callable[[], Settings], tmp_path: Path
) -> None:
    settings, out = graphs(), tmp_path / "out"
    assert invoke(settings, run_args("files", out))[0] == 0
    code, _, stderr = invoke(settings, run_args("files", out, steps=4))
    assert code == 1 and len(stderr.strip().splitlines()) == 1
    assert "another configuration (steps: 3 there, 4 now)" in stderr


def test_files_without_out_and_replay_without_out_are_one_line_errors(
    graphs: Callable[[], Settings], tmp_path: Path
) -> None:
    settings = graphs()
    code, _, stderr = invoke(
        settings, [a for a in run_args("files", tmp_path) if a not in ("--out", str(tmp_path))]
    )
    assert (
        code == 1
        and stderr.strip() == "error: --backend files writes each request to answer later: give --out DIR"
    )
    replay = tmp_path / "empty.jsonl"
    replay.write_text("", encoding="utf-8")
    args = [a for a in run_args(f"replay:{replay}", tmp_path) if a not in ("--out", str(tmp_path))]
    code, _, stderr = invoke(settings, args)
    assert code == 1 and len(stderr.strip().splitlines()[-1:]) == 1
    assert stderr.strip().splitlines()[-1].startswith("error: replay:empty.jsonl has no reply for step 1")
    assert "Traceback" not in stderr


def test_bench_stops_every_run_awaiting_its_reply_and_the_same_command_resumes_them(
    graphs: Callable[[], Settings], tmp_path: Path
) -> None:
    settings, out = graphs(), tmp_path / "bench"
    tasks = [TASK, str(SUITE / "level1" / "22_Tanh.py")]
    args = [
        "--home", str(settings.htam_home), "bench", "--tasks", *tasks, "--backend", "files", "--steps", "1",
        "--device", "cpu", "--shape", "smoke", "--workers", "2", "--out", str(out), "--json",
    ]  # fmt: skip
    code, stdout, stderr = invoke(settings, args)
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["awaiting_reply"] == 2 and summary["runs"] == 0
    assert stderr.strip().splitlines()[-1].startswith("2 runs await a reply: answer each ")
    assert not (out / "results.jsonl").exists()  # nothing finished: no results row
    requests = sorted(out.glob("runs/*/htam/seed_0/pending/step_1.request.md"))
    assert len(requests) == 2
    for request in requests:
        request.with_name("step_1.reply.md").write_text("STRATEGY: none\nno code", encoding="utf-8")
    code, stdout, stderr = invoke(settings, args)
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["awaiting_reply"] == 0 and summary["runs"] == 2 and summary["statuses"] == {"done": 2}
    for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        assert row["trajectory"][0]["error_kind"] == "no_code" and row["resumed_after_steps"] == 0
    assert not list(out.glob("runs/*/htam/seed_0/pending"))
    assert len(list(out.glob("runs/*/htam/seed_0/candidates/step_1.reply.md"))) == 2
