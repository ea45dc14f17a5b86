"""A bank file written by `htam-graph memory export` loads into a plain Neo4j with APOC's own procedure,
`apoc.import.json`, because its lines are in the shape of `apoc.export.json.all` (docs/neo4j/browser_guide.md
says how). The database has no htam-graph schema, only the per-label `neo4jImportId` uniqueness constraints
APOC requires of any import, and the loaded graph equals the one exported: every node and relationship, every
count and sum, and the Browser guide's questions give the same answers.

Needs the server's import folder on this machine (HTAM_NEO4J_IMPORT_DIR, set by scripts/neo4j-test-server) and
APOC with `apoc.import.file.enabled=true`: the repo's test server has both.
"""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from htam_graph.cli.main import _register, cli
from htam_graph.settings import Settings
from htam_graph.store.falkordb_store import FalkorDBStore

_register()
HERE = Path(__file__).resolve().parent
# the memory of a 100-task benchmark on an H200 (results/h200/NOTES.md, section 4): 179 attempts, 32 runs
RECORDED_BANK = HERE.parent / "data" / "h200_memory_bank" / "htam_bank.jsonl.gz"
_load = runpy.run_path(str(HERE / "sibling_module.py"))["load_sibling"]
stats = _load("bank_stats").stats
neo4j_guide = _load("neo4j_guide")
TASK = "kernelbench/level1/88_MinGPTNewGelu"  # the bank's task with the most attempts


def memory_cli(settings: Settings, *args: str) -> str:
    env = {"HTAM_GRAPH_NAME": settings.graph_name, "NEO4J_URI": None, "HTAM_CONFIG": None}
    result = CliRunner().invoke(cli, ["--home", str(settings.htam_home), "memory", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.output


def make_plain(store: Any) -> None:
    """No node (but the test database's marker), constraint or index (but the token lookups): as installed."""
    store.run_text("MATCH (n) WHERE NOT n:HtamTestMarker DETACH DELETE n")  # the fixture's SchemaVersion
    for row in store.run_text("SHOW CONSTRAINTS YIELD name RETURN name"):
        store.run_text(f"DROP CONSTRAINT `{row['name']}`")
    for row in store.run_text("SHOW INDEXES YIELD name, type WHERE type <> 'LOOKUP' RETURN name"):
        store.run_text(f"DROP INDEX `{row['name']}`")


def keys(store: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = store.run_text(
        "MATCH (n) WHERE NOT n:HtamTestMarker RETURN labels(n) AS labels, n.key AS key"
    )
    return rows


def answers(store: Any) -> list[list[tuple[Any, ...]]]:
    """Every tabular question of the Browser guide, answered (floats rounded, as the engines sum differently)."""
    _, params, queries = neo4j_guide.guide()
    params = {**params, "task": TASK}  # the guide's example task is not in this bank
    out = []
    for query in queries:
        if neo4j_guide.is_picture(query):
            continue  # whole nodes, whose engine ids differ
        rows = store.run_text(query, neo4j_guide.used_params(query, params))
        out.append([tuple(round(v, 9) if isinstance(v, float) else v for v in r.values()) for r in rows])
    return out


@pytest.mark.neo4j
@pytest.mark.parametrize("name", ["bank.jsonl", "bank.jsonl.gz"])
def test_exported_bank_loads_with_apoc_import_json(
    name: str, htam_settings: Settings, embedded_server: Any, neo4j_store: Any, neo4j_server: Any
) -> None:
    if not neo4j_server.import_dir:
        pytest.skip("HTAM_NEO4J_IMPORT_DIR is not set: where the server reads file:/// URLs is unknown")
    memory_cli(htam_settings, "import", str(RECORDED_BANK))
    path = Path(neo4j_server.import_dir) / name
    memory_cli(htam_settings, "export", str(path))
    manifest = json.loads(path.with_name(name + ".manifest.json").read_text())
    source = FalkorDBStore(embedded_server.socket_path, htam_settings.graph_name)
    make_plain(neo4j_store)
    labels = sorted(manifest["nodes"])
    try:
        for label in labels:  # what APOC asks of every import: a unique import id per label
            neo4j_store.run_text(
                f"CREATE CONSTRAINT apoc_import_{label} FOR (n:{label}) REQUIRE n.neo4jImportId IS UNIQUE"
            )
        # not {cleanup: true}: in APOC 5.26 it leaves the ids off the nodes, so no relationship finds its ends
        config = {"compression": "GZIP"} if name.endswith(".gz") else {}
        (loaded,) = neo4j_store.run_text(
            "CALL apoc.import.json($url, $config) YIELD nodes, relationships RETURN nodes, relationships",
            {"url": f"file:///{name}", "config": config},
        )
        assert loaded == {
            "nodes": sum(manifest["nodes"].values()),
            "relationships": sum(manifest["relationships"].values()),
        }
        by_label = neo4j_store.run_text(
            "MATCH (n) WHERE NOT n:HtamTestMarker RETURN labels(n) AS labels, count(*) AS n"
        )
        assert {r["labels"][0]: r["n"] for r in by_label} == manifest["nodes"]
        assert all(len(r["labels"]) == 1 for r in by_label)
        by_type = neo4j_store.run_text("MATCH ()-[r]->() RETURN type(r) AS type, count(*) AS n")
        assert {r["type"]: r["n"] for r in by_type} == manifest["relationships"]
        ids = neo4j_store.run_text(
            "MATCH (n) WHERE NOT n:HtamTestMarker RETURN collect(n.neo4jImportId) AS ids"
        )
        assert sorted(ids[0]["ids"]) == sorted(f"{r['labels'][0]}:{r['key']}" for r in keys(neo4j_store))
        neo4j_store.run_text("MATCH (n) WHERE n.neo4jImportId IS NOT NULL REMOVE n.neo4jImportId")

        expected = stats(source)
        assert expected["labels"]["Attempt"] == 179 and manifest["nodes"]["Attempt"] == 179
        assert stats(neo4j_store) == expected
        guide = answers(source)
        assert all(guide), guide  # every question has an answer in this bank
        assert answers(neo4j_store) == guide
    finally:
        source.close()
        for label in labels:
            neo4j_store.run_text(f"DROP CONSTRAINT apoc_import_{label} IF EXISTS")
