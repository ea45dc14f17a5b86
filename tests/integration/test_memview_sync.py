"""`memory push / pull`: the copy through the portable bank between two embedded graphs, idempotence, a refused
Neo4j port, and (marker neo4j) a recorded bank pushed to a real Neo4j server and pulled back into a fresh
embedded graph with every count and sum unchanged."""

from __future__ import annotations

import runpy
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from htam_graph import memory
from htam_graph.cli.main import _register, cli
from htam_graph.cli.memsync import copy_bank
from htam_graph.model import AttemptRecord
from htam_graph.settings import Settings
from htam_graph.store.falkordb_store import FalkorDBStore

_register()
PASSWORD = "pa55-Secret-w0rd"
# a bank recorded by a real benchmark run (110 attempts over 6 KernelBench tasks)
RECORDED_BANK = Path(__file__).resolve().parents[1] / "data" / "sample_bench" / "memory" / "bank.jsonl"
stats = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]("bank_stats").stats


def refused_port() -> int:
    # Bind then close: nothing listens there afterwards, so connecting is refused at once.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def invoke(settings: Settings, *args: str) -> Result:
    env = {
        "HTAM_GRAPH_NAME": settings.graph_name,
        "NEO4J_URI": None,
        "HTAM_CONFIG": None,
        "NEO4J_PASSWORD": PASSWORD,
    }
    return CliRunner().invoke(cli, ["--home", str(settings.htam_home), "memory", *args], env=env)


def attempts() -> list[AttemptRecord]:
    return [
        AttemptRecord(
            key=f"s{i}",
            run_key="r",
            task_key="t",
            step=i,
            global_key="fusion",
            local_key="fusion.elementwise_chain",
            prev_global_key="memory_access" if i else None,
            status="improved",
            compiled=True,
            correct=True,
            gain=0.1 * (i + 1),
            gpu_arch="sm_90",
            created_ms=1000 + i,
        )  # fmt: skip
        for i in range(3)
    ]


def fusion_stats(store: Any) -> tuple[int, float]:
    row = store.run_text("MATCH (g:Global {key: 'fusion'}) RETURN g.attempts AS n, g.gain_sum AS s")[0]
    return int(row["n"]), float(row["s"])


def test_copy_bank_between_two_graphs_is_idempotent(store_factory: Any) -> None:
    source, target = store_factory(), store_factory()
    memory.ensure_seeded(source)
    memory.record_attempts(source, attempts())
    manifest, counts = copy_bank(source, target)
    assert counts.attempts_new == 3 and counts.attempts_known == 0
    assert manifest.nodes["Attempt"] == 3
    assert fusion_stats(target) == fusion_stats(source) == (3, pytest.approx(0.6))
    _, again = copy_bank(source, target)
    assert (again.attempts_new, again.attempts_known) == (0, 3)
    assert fusion_stats(target) == (3, pytest.approx(0.6))  # pushing twice adds nothing


@pytest.mark.parametrize("command", [("push", "--to"), ("pull", "--from")])
def test_unreachable_neo4j_is_one_line_exit_1(htam_settings: Settings, command: tuple[str, str]) -> None:
    uri = f"bolt://127.0.0.1:{refused_port()}"  # the password comes from NEO4J_PASSWORD
    result = invoke(htam_settings, command[0], command[1], uri)
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach Neo4j at bolt://"), lines
    assert "Traceback" not in result.output and PASSWORD not in result.output


def test_bad_uri_and_self_copy_are_refused(htam_settings: Settings) -> None:
    result = invoke(htam_settings, "push", "--to", "http://localhost:7474")
    assert result.exit_code == 1 and "expected a neo4j:// or bolt:// URI" in result.output
    env = {
        "HTAM_GRAPH_NAME": htam_settings.graph_name,
        "NEO4J_URI": "bolt://127.0.0.1:1",
        "HTAM_CONFIG": None,
    }
    same = CliRunner().invoke(cli, ["memory", "pull", "--from", "bolt://127.0.0.1:1"], env=env)
    assert same.exit_code == 1 and "is the configured store itself" in same.output


def run_memory(settings: Settings, graph_name: str, *args: str) -> Result:
    """`htam-graph --home H memory ARGS` on embedded graph `graph_name`; Neo4j credentials from the environment."""
    env = {"HTAM_GRAPH_NAME": graph_name, "NEO4J_URI": None, "HTAM_CONFIG": None}
    result = CliRunner().invoke(cli, ["--home", str(settings.htam_home), "memory", *args], env=env)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def second_graph(embedded_server: Any) -> Iterator[FalkorDBStore]:
    """Another fresh embedded graph on the session server (deleted afterwards)."""
    store = FalkorDBStore(embedded_server.socket_path, f"pull_{uuid.uuid4().hex[:12]}")
    yield store
    store.delete_graph()
    store.close()


@pytest.mark.neo4j
def test_push_and_pull_round_trip_a_recorded_bank_through_neo4j(
    htam_settings: Settings, embedded_server: Any, neo4j_store: Any, neo4j_server: Any, second_graph: Any
) -> None:
    imported = run_memory(htam_settings, htam_settings.graph_name, "import", str(RECORDED_BANK))
    assert "110 new attempts" in imported.output
    local = FalkorDBStore(embedded_server.socket_path, htam_settings.graph_name)
    try:
        pushed = run_memory(htam_settings, htam_settings.graph_name, "push", "--to", neo4j_server.uri)
        assert f"to {neo4j_server.uri}: 110 new attempts, 0 already there" in pushed.output
        expected = stats(local)
        assert expected["labels"]["Attempt"] == 110 and expected["rels"]["TRANSITION"] > 0
        assert stats(neo4j_store) == expected
        again = run_memory(htam_settings, htam_settings.graph_name, "push", "--to", neo4j_server.uri)
        assert "0 new attempts, 110 already there" in again.output
        assert stats(neo4j_store) == expected  # pushing twice adds nothing

        pulled = run_memory(htam_settings, second_graph.graph_name, "pull", "--from", neo4j_server.uri)
        assert f"from {neo4j_server.uri}: 110 new attempts, 0 already there" in pulled.output
        assert stats(second_graph) == expected
    finally:
        local.close()
