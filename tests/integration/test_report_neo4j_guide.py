"""docs/neo4j: every query of the Browser guide is portable Cypher (the shipped files' linter) and returns rows on
a real seeded graph with recorded attempts (so a misspelt label or property, which would just return nothing,
fails here); the GraSS style names only labels and relationship types of our schema."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

from htam_graph import bank, memory
from htam_graph.model import AttemptRecord, RunRecord

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "neo4j" / "browser_guide.md"
GRASS = ROOT / "docs" / "neo4j" / "htam.grass"
TASK = "kernelbench/level1/19_ReLU"


def _linter() -> Any:
    spec = importlib.util.spec_from_file_location(
        "_cypher_lint", ROOT / "tests" / "unit" / "test_cypher_lint.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def guide_blocks() -> tuple[dict[str, str], list[str]]:
    blocks = re.findall(r"```cypher\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    params_blocks = [b for b in blocks if b.lstrip().startswith(":params")]
    assert len(params_blocks) == 1, "the guide sets its parameters in one :params block"
    params = dict(re.findall(r"(\w+):\s*'([^']*)'", params_blocks[0]))
    return params, [b.strip() for b in blocks if b not in params_blocks]


PARAMS, QUERIES = guide_blocks()


def test_the_guide_has_the_engineers_questions() -> None:
    assert len(QUERIES) >= 8
    assert set(PARAMS) == {"direction", "gpu_arch", "op_tag", "task"}
    used = {p for q in QUERIES for p in re.findall(r"\$(\w+)", q)}
    assert used == set(PARAMS), "every parameter set is used and every one used is set"


@pytest.mark.parametrize("query", QUERIES, ids=[f"q{i}" for i in range(len(QUERIES))])
def test_guide_query_is_portable(query: str) -> None:
    assert _linter().lint(query) == []


def _fill(store: Any) -> None:
    memory.ensure_seeded(store)
    store.run(
        "task_upsert",
        {"rows": [{"key": TASK, "props": {"suite": "kernelbench", "level": 1, "name": "19_ReLU",
                                          "op_tags": ["elementwise", "activation"]}}]},
    )  # fmt: skip
    memory.record_run(
        store, RunRecord(key="run1", task_key=TASK, policy="htam", backend="rules", gpu_arch="sm_90")
    )
    steps = [  # (global, local, prev global, status, error kind, speedup)
        ("fusion", "fusion.elementwise_chain", None, "improved", None, 1.4),
        ("memory_access", "memory_access.vectorized_loads", "fusion", "improved", None, 1.9),
        ("parallelism", "parallelism.block_size_tuning", "memory_access", "failed", "compile_error", None),
        ("fusion", "fusion.elementwise_chain", "parallelism", "correct", None, 1.2),
    ]
    records = []
    for i, (g, loc, prev, status, kind, speed) in enumerate(steps, start=1):
        ok = status != "failed"
        records.append(
            AttemptRecord(
                key=f"a{i}", run_key="run1", task_key=TASK, step=i, global_key=g, local_key=loc,
                prev_global_key=prev, prev_attempt_key=f"a{i - 1}" if i > 1 else None, status=status,
                error_kind=kind, compiled=kind != "compile_error", correct=ok, speedup_x=speed,
                gain=0.3 if status == "improved" else (-0.1 if ok else 0.0), gpu_arch="sm_90",
                kernel_language="triton", kernel_source=f"# kernel {i}\n", created_ms=1000 + i,
            )
        )  # fmt: skip
    memory.record_attempts(store, records)


def test_every_guide_query_returns_rows_on_a_seeded_graph(store: Any) -> None:
    _fill(store)
    for query in QUERIES:
        names = set(re.findall(r"\$(\w+)", query))
        rows = store.run_text(query, {k: v for k, v in PARAMS.items() if k in names})
        assert rows, f"no row from:\n{query}"
    best_next = store.run_text(QUERIES[0], {"direction": "fusion", "gpu_arch": "sm_90"})
    assert [r["next_direction"] for r in best_next] == ["memory_access"]
    trajectory = [q for q in QUERIES if "a.step AS step" in q][0]
    rows = store.run_text(trajectory, {"task": TASK})
    assert [(r["step"], r["direction"], r["status"]) for r in rows] == [
        (1, "fusion", "improved"),
        (2, "memory_access", "improved"),
        (3, "parallelism", "failed"),
        (4, "fusion", "correct"),
    ]
    failed = [q for q in QUERIES if "a.status = 'failed'" in q][0]
    assert store.run_text(failed) == [
        {"from_direction": "memory_access", "to_direction": "parallelism", "error_kind": "compile_error",
         "failures": 1}
    ]  # fmt: skip


def test_grass_styles_only_our_labels_and_types() -> None:
    selectors: list[tuple[str, str]] = []
    inside = False
    for line in filter(None, (x.strip() for x in GRASS.read_text(encoding="utf-8").splitlines())):
        if not inside:  # a selector opens a block
            m = re.fullmatch(r"(node|relationship)(?:\.(\w+))? \{", line)
            assert m, f"not a selector: {line!r}"
            selectors.append((m.group(1), m.group(2) or ""))
            inside = True
        elif line == "}":
            inside = False
        else:
            assert re.fullmatch(r"[a-z-]+: .+;", line), f"not a style property: {line!r}"
    assert not inside, "unclosed block"
    assert ("node", "") in selectors and ("relationship", "") in selectors  # defaults
    assert {n for k, n in selectors if k == "node" and n} == set(bank.LABELS)
    assert {n for k, n in selectors if k == "relationship" and n} == set(bank.REL_TYPES)
