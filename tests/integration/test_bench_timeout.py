"""`--task-timeout`: a run that hangs is killed with every process it started and recorded as "timeout";
the bench goes on with the other runs. The bench runs with `--frozen-memory`, so the finished run must have
written nothing to the graph."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from htam_graph.cli.main import _register, cli
from htam_graph.settings import Settings
from htam_graph.store.embedded import ServerInfo
from htam_graph.store.falkordb_store import FalkorDBStore

# The fixture waits this long for the sleeper (which would take 600 s). The tiny Tanh run beside it must finish
# within it: ~14 s on this 2-core machine beside another bench test, ~20-40 s in a loaded full CI run.
TASK_TIMEOUT_S = 60

SLEEPY = """import os
import time

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with open({pids!r}, "a") as f:
            f.write(f"{{os.getpid()}}\\n")
        time.sleep(600)
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(8, 256)]


def get_init_inputs():
    return []
"""
TANH = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(8, 256)]


def get_init_inputs():
    return []
"""


@pytest.fixture(scope="module", autouse=True)
def _commands() -> None:
    _register()


@pytest.fixture(scope="module")
def graph(embedded_server: ServerInfo) -> Iterator[tuple[Settings, FalkorDBStore]]:
    name = f"bench_timeout_{os.getpid()}"
    store = FalkorDBStore(embedded_server.socket_path, name)
    yield Settings(htam_home=embedded_server.home, graph_name=name), store
    store.delete_graph()
    store.close()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.fixture(scope="module")
def timed_out(
    graph: tuple[Settings, FalkorDBStore], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    settings, _ = graph
    tmp = tmp_path_factory.mktemp("timeout")
    pids = tmp / "pids.txt"
    level = tmp / "suite" / "kernelbench" / "level1"
    level.mkdir(parents=True)
    (level / "1_Sleepy.py").write_text(SLEEPY.format(pids=str(pids)), encoding="utf-8")
    (level / "2_Tanh.py").write_text(TANH, encoding="utf-8")
    out = tmp / "out"
    args = [
        "--home", str(settings.htam_home), "bench", "--tasks", str(level), "--steps", "1", "--device", "cpu",
        "--shape", "smoke", "--workers", "2", "--task-timeout", str(TASK_TIMEOUT_S), "--frozen-memory",
        "--out", str(out), "--json",
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args, env={"HTAM_GRAPH_NAME": settings.graph_name, "NEO4J_URI": ""})
    assert result.exit_code == 0, result.output
    rows = {r["task"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    return {"rows": rows, "pids": pids, "summary": json.loads(result.stdout), "out": out}


def test_hanging_run_is_recorded_as_timeout(timed_out: dict[str, Any]) -> None:
    row = timed_out["rows"]["kernelbench/level1/1_Sleepy"]
    assert row["status"] == "timeout"
    assert f"--task-timeout {TASK_TIMEOUT_S} s" in row["error"]
    assert row["best_is_reference"] is None and row["best_speedup_eager_x"] is None
    assert row["wall_s"] >= TASK_TIMEOUT_S


def test_every_process_of_the_timed_out_run_is_gone(timed_out: dict[str, Any]) -> None:
    pids = [int(p) for p in timed_out["pids"].read_text().split()]
    assert pids, "the sleeping forward never ran: the test would prove nothing"
    assert [p for p in pids if _alive(p)] == []


def test_the_bench_went_on_with_the_other_run(timed_out: dict[str, Any]) -> None:
    row = timed_out["rows"]["kernelbench/level1/2_Tanh"]
    assert row["status"] == "done" and row["wall_s"] < TASK_TIMEOUT_S
    assert timed_out["summary"]["statuses"] == {"done": 1, "timeout": 1}


def test_frozen_memory_writes_nothing(
    graph: tuple[Settings, FalkorDBStore], timed_out: dict[str, Any]
) -> None:
    _, store = graph
    run_key = timed_out["rows"]["kernelbench/level1/2_Tanh"]["run_key"]
    assert store.run_text("MATCH (a:Attempt) RETURN count(a) AS n")[0]["n"] == 0
    assert store.run_text("MATCH (r:Run {key: $k}) RETURN count(r) AS n", {"k": run_key})[0]["n"] == 0
    assert store.run_text("MATCH (g:Global) RETURN count(g) AS n")[0]["n"] > 0  # the memory was there to read
