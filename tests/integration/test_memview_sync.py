"""`memory push / pull`: the copy through the portable bank (here between two real embedded graphs: the same
code path as with Neo4j, whose server cannot be installed here), idempotence, and a refused Neo4j port for real."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from click.testing import CliRunner, Result

from htam_graph import memory
from htam_graph.cli.main import _register, cli
from htam_graph.cli.memsync import copy_bank
from htam_graph.model import AttemptRecord
from htam_graph.settings import Settings

_register()
PASSWORD = "pa55-Secret-w0rd"


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
