"""`htam-graph bench --budget-usd`: one dollar budget shared by every run, through real worker processes.

The LLM is the local fake Anthropic server (127.0.0.1): every reply costs exactly $3 (1M input tokens of
claude-sonnet-4-6 at $3/M) and carries no code, so no candidate is evaluated and the runs stay fast. Three
tiny KernelBench tasks, two steps each, one worker, budget $7: the first run spends $6, the second starts
(6 < 7), spends $3 and is stopped cleanly before its second call, the third never starts. The bench still
writes its report and exits 1 saying the budget is spent; a resume with the same budget starts nothing; a
resume with a larger budget runs only what is left.
"""

from __future__ import annotations

import json
import os
import runpy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from htam_graph.cli.main import _register, cli
from htam_graph.settings import Settings
from htam_graph.store.embedded import ServerInfo
from htam_graph.store.falkordb_store import FalkorDBStore

SUITE = Path(__file__).resolve().parents[1] / "data" / "bench_suite" / "kernelbench"
KEYS = ["kernelbench/level1/20_LeakyReLU", "kernelbench/level1/22_Tanh", "kernelbench/level1/24_LogSoftmax"]


fls = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]("fake_llm_server")


@pytest.fixture(scope="module", autouse=True)
def _commands() -> None:
    _register()


@pytest.fixture(scope="module")
def settings(embedded_server: ServerInfo) -> Iterator[Settings]:
    name = f"budget_{os.getpid()}_{time.monotonic_ns() % 10**9}"
    yield Settings(htam_home=embedded_server.home, graph_name=name)
    cleanup = FalkorDBStore(embedded_server.socket_path, name)
    cleanup.delete_graph()
    cleanup.close()


def _bench(settings: Settings, server: Any, out: Path, budget: str, *extra: str) -> Result:
    args = [
        "--home", str(settings.htam_home), "bench", "--tasks", str(SUITE), "--backend", "anthropic:claude-sonnet-4-6",
        "--base-url", server.url, "--steps", "2", "--device", "cpu", "--shape", "smoke", "--workers", "1",
        "--budget-usd", budget, "--out", str(out), "--json", *extra,
    ]  # fmt: skip
    env = {"HTAM_GRAPH_NAME": settings.graph_name, "NEO4J_URI": "", "ANTHROPIC_API_KEY": "sk-test-anthropic"}
    return CliRunner().invoke(cli, args, env=env)


def _rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]


def _ledger(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "budget.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def benches(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    out = tmp_path_factory.mktemp("budget") / "bench"
    with fls.FakeLLMServer() as server:
        for _ in range(12):  # more than needed: the budget, not the script, must stop the bench
            server.enqueue(
                fls.MESSAGES,
                fls.anthropic_message("No code this time.", input_tokens=1_000_000, output_tokens=0),
            )
        first = _bench(settings, server, out, "7")
        after_first = {
            "rows": _rows(out),
            "ledger": _ledger(out),
            "calls": len(server.received(fls.MESSAGES)),
        }
        same = _bench(settings, server, out, "7")
        calls_same = len(server.received(fls.MESSAGES))
        larger = _bench(settings, server, out, "20")
        yield {
            "out": out, "first": first, "after_first": after_first, "same": same, "calls_same": calls_same,
            "larger": larger, "calls": len(server.received(fls.MESSAGES)),
        }  # fmt: skip


def test_spent_budget_stops_the_bench_cleanly_and_says_so(benches: dict[str, Any]) -> None:
    first = benches["first"]
    assert first.exit_code == 1, first.output
    assert "bench budget of $7.00 spent ($9.0000 used): 1 run(s) stopped early, 1 not run" in first.output
    assert "Traceback" not in first.output
    summary = json.loads(first.stdout[: first.stdout.rindex("}") + 1])
    assert summary["budget"] == {
        "limit_usd": 7.0, "spent_usd": 9.0, "exhausted": True, "runs_stopped": 1, "runs_not_run": 1,
    }  # fmt: skip
    assert summary["report"] and Path(summary["report"]).exists()  # the report is still written
    rows = benches["after_first"]["rows"]
    assert [(r["task"], r["status"], len(r["trajectory"])) for r in rows] == [
        (KEYS[0], "done", 2),
        (KEYS[1], "done", 1),
    ]
    assert rows[0]["stopped_reason"] == "2 steps done" and rows[1]["stopped_reason"] == "budget"
    assert "shared budget of $7.00 spent ($9.0000 used)" in rows[1]["error"]
    assert rows[1]["usage"]["cost_usd"] == pytest.approx(3.0)  # each run's own share
    ledger = benches["after_first"]["ledger"]
    assert benches["after_first"]["calls"] == 3 and [e["cost_usd"] for e in ledger] == [3.0, 3.0, 3.0]
    assert [e["run"] for e in ledger] == [f"{KEYS[0]}/htam/0"] * 2 + [f"{KEYS[1]}/htam/0"]


def test_resume_with_the_same_budget_starts_nothing(benches: dict[str, Any]) -> None:
    same = benches["same"]
    assert same.exit_code == 1 and "1 run(s) stopped early, 1 not run" in same.output, same.output
    assert benches["calls_same"] == 3  # no paid call was made


def test_resume_with_a_larger_budget_runs_only_what_is_left(benches: dict[str, Any]) -> None:
    larger = benches["larger"]
    assert larger.exit_code == 0, larger.output
    rows = _rows(benches["out"])
    assert [r["task"] for r in rows] == KEYS and rows[2]["stopped_reason"] == "2 steps done"
    assert benches["calls"] == 5 and sum(e["cost_usd"] for e in _ledger(benches["out"])) == pytest.approx(
        15.0
    )
    meta = json.loads((benches["out"] / "bench.json").read_text(encoding="utf-8"))
    assert meta["budget"]["spent_usd"] == 15.0 and meta["budget"]["exhausted"] is False
    assert "--budget-usd 20" in meta["command"]


def test_ray_executor_shares_the_budget(settings: Settings, tmp_path: Path) -> None:
    """Ray tasks write the same DIR/budget.jsonl (one machine): the run in flight stops at its third call,
    and no other run starts."""
    ray = pytest.importorskip("ray", reason="Ray is part of the dev extra: pip install -e '.[dev]'")
    out = tmp_path / "ray"
    saved = os.environ.get("ANTHROPIC_API_KEY")
    os.environ["ANTHROPIC_API_KEY"] = "sk-test-anthropic"  # Ray's worker processes inherit it from here
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with fls.FakeLLMServer() as server:
            for _ in range(12):
                server.enqueue(
                    fls.MESSAGES, fls.anthropic_message("No code.", input_tokens=1_000_000, output_tokens=0)
                )
            result = _bench(settings, server, out, "5", "--executor", "ray", "--steps", "3")
            calls = len(server.received(fls.MESSAGES))
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("ANTHROPIC_API_KEY", None)
        else:
            os.environ["ANTHROPIC_API_KEY"] = saved
    assert result.exit_code == 1, result.output
    assert "bench budget of $5.00 spent ($6.0000 used): 1 run(s) stopped early, 2 not run" in result.output
    rows = _rows(out)
    assert [(r["task"], r["status"], r["stopped_reason"], len(r["trajectory"])) for r in rows] == [
        (KEYS[0], "done", "budget", 2)
    ]
    assert calls == 2 and [e["cost_usd"] for e in _ledger(out)] == [3.0, 3.0]
