"""`htam-graph memory ...` through click's CliRunner on the session's embedded FalkorDB."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from htam_graph import memory
from htam_graph.cli.main import _register, cli
from htam_graph.model import AttemptRecord
from htam_graph.seed import load_seed
from htam_graph.settings import Settings
from htam_graph.store.falkordb_store import FalkorDBStore

_register()


def invoke(settings: Settings, *args: str, graph: str | None = None) -> Result:
    env = {
        "HTAM_GRAPH_NAME": graph or settings.graph_name,
        "NEO4J_URI": None,
        "HTAM_CONFIG": None,
        "COLUMNS": "200",
    }
    return CliRunner().invoke(cli, ["--home", str(settings.htam_home), "memory", *args], env=env)


def one_line_error(result: Result, needle: str) -> None:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.output


def record_some(settings: Settings, embedded_server: Any, graph: str | None = None) -> None:
    store = FalkorDBStore(embedded_server.socket_path, graph or settings.graph_name)
    try:
        memory.ensure_seeded(store)
        memory.record_attempts(
            store,
            [
                AttemptRecord(
                    key=f"c{i}",
                    run_key="r",
                    task_key="t",
                    step=i,
                    global_key="fusion",
                    local_key="fusion.elementwise_chain",
                    prev_global_key="memory_access",
                    status="improved",
                    compiled=True,
                    correct=True,
                    gain=0.2,
                    gpu_arch="sm_90",
                    kernel_source=f"k{i}",
                    kernel_language="triton",
                    created_ms=5,
                )
                for i in range(3)
            ],
        )
    finally:
        store.close()


def test_seed_and_show(htam_settings: Settings) -> None:
    seed = load_seed()
    first = invoke(htam_settings, "seed")
    assert first.exit_code == 0, first.output
    assert f"{len(seed.globals)} directions, {len(seed.locals)} strategies" in first.output
    assert invoke(htam_settings, "seed").output == first.output
    shown = invoke(htam_settings, "show", "--json")
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.output)
    assert data["labels"]["Global"] == len(seed.globals) and data["labels"]["Local"] == len(seed.locals)
    table = invoke(htam_settings, "show")
    assert table.exit_code == 0 and "REFINES" in table.output and "only seed priors" in table.output


def test_show_lists_observed_transitions(htam_settings: Settings, embedded_server: Any) -> None:
    record_some(htam_settings, embedded_server)
    result = invoke(htam_settings, "show", "--json")
    top = json.loads(result.output)["top_transitions"]
    assert top[0]["src"] == "memory_access" and top[0]["dst"] == "fusion" and top[0]["count"] == 3
    assert "memory_access" in invoke(htam_settings, "show").output


def test_seed_file_malformed_is_one_line(htam_settings: Settings, tmp_path: Path) -> None:
    bad = tmp_path / "seed.yaml"
    bad.write_text("version: 1\nglobals: [{key: a}]\nlocals: []\n")
    one_line_error(invoke(htam_settings, "seed", "--file", str(bad)), "seed")


def test_suggest_ranks_directions_and_strategies(htam_settings: Settings, embedded_server: Any) -> None:
    record_some(htam_settings, embedded_server)
    result = invoke(htam_settings, "suggest", "--history", "memory_access", "--gpu-arch", "sm_90", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    dirs = data["directions"]
    assert len(dirs) == len(load_seed().globals)
    assert sum(d["probability"] for d in dirs) == pytest.approx(1.0)
    assert data["best"] == dirs[0]["key"]
    fusion = next(d for d in dirs if d["key"] == "fusion")
    assert fusion["support"] == 3 and fusion["score"] > 0.1
    assert data["strategies"] and all(s["key"].startswith(data["best"] + ".") for s in data["strategies"])
    table = invoke(htam_settings, "suggest", "--history", "memory_access,fusion")
    assert table.exit_code == 0 and "probability" in table.output and "top strategies under" in table.output


def test_suggest_unknown_history_key_is_one_line(htam_settings: Settings) -> None:
    one_line_error(invoke(htam_settings, "suggest", "--history", "fusion,warp_magic"), "warp_magic")


def test_export_import_and_corrupt_import(
    htam_settings: Settings, embedded_server: Any, tmp_path: Path
) -> None:
    record_some(htam_settings, embedded_server)
    path = tmp_path / "bank.jsonl"
    out = invoke(htam_settings, "export", str(path))
    assert out.exit_code == 0, out.output
    assert path.exists() and (tmp_path / "bank.jsonl.manifest.json").exists()
    other = htam_settings.graph_name + "_b"
    try:
        imported = invoke(htam_settings, "import", str(path), graph=other)
        assert imported.exit_code == 0, imported.output
        assert "3 new attempts" in imported.output
        again = invoke(htam_settings, "import", str(path), graph=other)
        assert "0 new attempts, 3 already known" in again.output
        path.write_text(path.read_text()[:-10])
        one_line_error(invoke(htam_settings, "import", str(path), graph=other), "sha256")
    finally:
        cleanup = FalkorDBStore(embedded_server.socket_path, other)
        cleanup.delete_graph()
        cleanup.close()
