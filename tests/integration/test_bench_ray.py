"""`htam-graph bench --executor ray` on a local Ray instance on the CPU: the same 3-task bench as
test_bench_local, one Ray task per run, results gathered as they finish, run files shipped back to DIR/runs."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from htam_graph.cli.main import _register, cli
from htam_graph.settings import Settings
from htam_graph.store.embedded import ServerInfo
from htam_graph.store.falkordb_store import FalkorDBStore

ray = pytest.importorskip("ray", reason="Ray is part of the dev extra: pip install -e '.[dev]'")

SUITE = Path(__file__).resolve().parents[1] / "data" / "bench_suite" / "kernelbench"
KEYS = [f"kernelbench/level1/{n}" for n in ("20_LeakyReLU", "22_Tanh", "24_LogSoftmax")]


@pytest.fixture(scope="module", autouse=True)
def _commands() -> None:
    _register()


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def settings(embedded_server: ServerInfo) -> Iterator[Settings]:
    name = f"bench_ray_{os.getpid()}"
    yield Settings(htam_home=embedded_server.home, graph_name=name)
    store = FalkorDBStore(embedded_server.socket_path, name)
    store.delete_graph()
    store.close()


def test_ray_executor_runs_the_bench(local_ray: None, settings: Settings, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = [
        "--home", str(settings.htam_home), "bench", "--tasks", str(SUITE), "--steps", "1", "--device", "cpu",
        "--shape", "smoke", "--executor", "ray", "--workers", "2", "--out", str(out), "--json",
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args, env={"HTAM_GRAPH_NAME": settings.graph_name, "NEO4J_URI": ""})
    assert result.exit_code == 0, result.output
    assert ray.is_initialized()  # the bench reused the caller's Ray and left it running
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["task"] for r in rows) == sorted(KEYS)
    assert all(r["status"] == "done" and r["policy"] == "htam" and r["seed"] == 0 for r in rows), rows
    meta = json.loads((out / "bench.json").read_text())
    assert meta["executor"] == "ray" and meta["device"] == "cpu" and meta["finished_ms"]
    for row in rows:  # files written on the Ray worker's node came back with the row
        run = out / "runs" / row["task"].replace("/", "__") / "htam" / "seed_0"
        assert json.loads((run / "summary.json").read_text())["run_key"] == row["run_key"]
        assert (run / "best.py").exists() and (run / "trajectory.json").exists()
        assert not (run / ".row.json").exists()
    assert (out / "memory" / "bank.jsonl").exists()
