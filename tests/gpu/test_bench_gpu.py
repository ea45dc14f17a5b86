"""`htam-graph bench` on CUDA (marker gpu: run on the GPU machine).

    pytest -m gpu tests/gpu/test_bench_gpu.py

Three small tasks x two policies with two local workers: every run is timed on the GPU, bench.json and the rows
name the GPU the workers saw, and the harness took the per-GPU timing lock in the bench's HTAM_GPU_LOCK_DIR.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from htam_graph.cli.main import _register, cli
from htam_graph.settings import Settings
from htam_graph.store.embedded import ServerInfo
from htam_graph.store.falkordb_store import FalkorDBStore

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
SUITE = Path(__file__).resolve().parents[1] / "data" / "bench_suite" / "kernelbench"


@pytest.fixture
def settings(embedded_server: ServerInfo) -> Iterator[Settings]:
    name = f"bench_gpu_{os.getpid()}"
    yield Settings(htam_home=embedded_server.home, graph_name=name)
    store = FalkorDBStore(embedded_server.socket_path, name)
    store.delete_graph()
    store.close()


def test_bench_on_cuda_with_two_workers(settings: Settings, tmp_path: Path) -> None:
    _register()
    locks, out = tmp_path / "locks", tmp_path / "out"
    args = [
        "--home", str(settings.htam_home), "bench", "--tasks", str(SUITE), "--policy", "htam", "--policy",
        "random", "--steps", "2", "--device", "cuda", "--workers", "2", "--task-timeout", "1200",
        "--out", str(out), "--json",
    ]  # fmt: skip
    env = {"HTAM_GRAPH_NAME": settings.graph_name, "NEO4J_URI": "", "HTAM_GPU_LOCK_DIR": str(locks)}
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["status"] == "done" for r in rows), rows
    gpu = torch.cuda.get_device_name(0)
    meta = json.loads((out / "bench.json").read_text())
    assert meta["device"] == "cuda" and meta["gpu_name"] == gpu and "CUDA events" in meta["timing_method"]
    timed = [r for r in rows if r["ref_eager_us"]]
    assert timed, "no run timed anything on the GPU"
    assert all(r["timing_on_cpu"] is False and r["gpu_name"] == gpu for r in timed)
    assert sorted(p.name for p in locks.glob("gpu*.lock")), "the harness never took the GPU timing lock"
