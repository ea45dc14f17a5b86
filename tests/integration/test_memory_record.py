"""Seeding and recording on the real embedded FalkorDB: exact stats, idempotency, the UNWIND-MERGE trap,
and concurrent writers losing no increment."""

from __future__ import annotations

import multiprocessing
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from htam_graph import memory
from htam_graph.errors import UnknownKeyError
from htam_graph.model import AttemptRecord, GlobalDirection, LocalStrategy, SeedMemory, TransitionPrior
from htam_graph.seed import load_seed


def tiny_seed(version: int = 1) -> SeedMemory:
    gl = [GlobalDirection(key=k, name=k.upper(), intent=f"do {k}") for k in ("ga", "gb", "gc")]
    lo = [
        LocalStrategy(
            key="ga.x", name="x", global_key="ga", languages=["triton"], pattern="p", op_tags=["matmul"]
        ),
        LocalStrategy(key="gb.y", name="y", global_key="gb", languages=["cuda", "triton"], pattern="q"),
    ]
    tr = [TransitionPrior(src="ga", dst="gb", rationale="because")]
    return SeedMemory(version=version, globals=gl, locals=lo, transitions=tr)


def attempt(key: str, **kw: Any) -> AttemptRecord:
    base: dict[str, Any] = dict(
        key=key,
        run_key="run1",
        task_key="task1",
        step=1,
        global_key="gb",
        status="improved",
        compiled=True,
        correct=True,
        gain=0.25,
        gpu_arch="sm_90",
        created_ms=1000,
    )
    base.update(kw)
    return AttemptRecord(**base)


def q(store: Any, text: str, **params: Any) -> list[dict[str, Any]]:
    return store.run_text(text, params)


def snapshot(store: Any) -> dict[str, Any]:
    """Every property of every node and relationship (the whole graph, order-independent)."""
    nodes = q(store, "MATCH (n) RETURN labels(n)[0] AS l, properties(n) AS p")
    rels = q(store, "MATCH (a)-[r]->(b) RETURN a.key AS a, type(r) AS t, properties(r) AS p, b.key AS b")
    return {
        "nodes": sorted(
            (r["l"], sorted(r["p"].items(), key=str)) for r in nodes if r["l"] != "SchemaVersion"
        ),
        "rels": sorted((r["a"], r["t"], r["b"], sorted(r["p"].items(), key=str)) for r in rels),
    }


def test_seeding_is_idempotent_and_keeps_evidence(store: Any) -> None:
    seed = load_seed()
    counts = memory.seed_memory(store, seed)
    assert (counts.globals, counts.locals, counts.transitions) == (
        len(seed.globals),
        len(seed.locals),
        len({(t.src, t.dst) for t in seed.transitions}),
    )
    first = memory.memory_summary(store)
    assert first.labels["Global"] == len(seed.globals) and first.labels["Local"] == len(seed.locals)
    assert first.relationships["REFINES"] == len(seed.locals)
    assert first.relationships["TRANSITION"] == counts.transitions
    g = seed.globals[0].key
    memory.record_attempt(store, attempt("a1", global_key=g, local_key=None))
    before = snapshot(store)
    assert memory.ensure_seeded(store, seed) is None  # current version: nothing to do
    memory.seed_memory(store, seed)
    after = snapshot(store)
    strip = lambda s: [n for n in s["nodes"] if n[0] != "SeedInfo"]  # noqa: E731 - seeded_ms changes
    assert strip(after) == strip(before) and after["rels"] == before["rels"]


def test_ensure_seeded_reseeds_a_newer_version(store: Any) -> None:
    assert memory.ensure_seeded(store, tiny_seed(1)) is not None
    assert memory.ensure_seeded(store, tiny_seed(1)) is None
    newer = tiny_seed(2).model_copy(
        update={"globals": [*tiny_seed().globals, GlobalDirection(key="gd", name="D", intent="i")]}
    )
    assert memory.ensure_seeded(store, newer) is not None
    assert [d.key for d in memory.directions(store)] == ["ga", "gb", "gc", "gd"]


def test_ensure_seeded_reseeds_an_edited_seed_of_the_same_version(store: Any) -> None:
    seed = tiny_seed(1)
    assert memory.ensure_seeded(store, seed) is not None
    edited = seed.model_copy(
        update={"locals": [loc.model_copy(update={"op_tags": ["conv_transpose"]}) for loc in seed.locals]}
    )
    assert memory.ensure_seeded(store, edited) is not None  # same version, other content
    assert memory.ensure_seeded(store, edited) is None
    key = edited.locals[0].key
    found = [c for c in memory.locals_for(store, edited.locals[0].global_key) if c.strategy.key == key]
    assert found[0].strategy.op_tags == ["conv_transpose"]
    older = tiny_seed(0)
    assert memory.ensure_seeded(store, older) is None  # never rolls a memory back to an older seed


def test_record_attempt_updates_every_stat_exactly(store: Any) -> None:
    memory.seed_memory(store, tiny_seed())
    good = attempt(
        "a1",
        step=1,
        global_key="gb",
        local_key="gb.y",
        prev_global_key="ga",
        gain=0.25,
        kernel_source="good kernel",
        kernel_language="triton",
        speedup_x=1.3,
    )
    hack = attempt(
        "a2",
        step=2,
        global_key="gb",
        local_key="gb.y",
        prev_global_key="ga",
        gain=0.5,
        error_kind="hack_detected",
        prev_attempt_key="a1",
        kernel_source="hack kernel",
    )
    broken = attempt(
        "a3",
        step=3,
        global_key="gb",
        local_key="gb.y",
        prev_global_key="ga",
        status="failed",
        compiled=False,
        correct=False,
        gain=0.0,
        error_kind="compile_error",
        gpu_arch="sm_80",
        prev_attempt_key="a2",
    )
    assert memory.record_attempts(store, [good, hack, broken]) == 3

    gb = q(store, "MATCH (g:Global {key:'gb'}) RETURN properties(g) AS p")[0]["p"]
    assert (gb["attempts"], gb["successes"], gb["compile_failures"]) == (3, 1, 1)
    assert gb["gain_sum"] == pytest.approx(0.25)  # the hack's gain never counts
    per_arch = {
        r["a"]: r["p"]
        for r in q(
            store, "MATCH (:Global {key:'gb'})-[s:STATS_ON]->(u:Gpu) RETURN u.key AS a, properties(s) AS p"
        )
    }
    assert per_arch["sm_90"] == {
        "attempts": 2,
        "successes": 1,
        "gain_sum": pytest.approx(0.25),
        "compile_failures": 0,
    }
    assert per_arch["sm_80"] == {"attempts": 1, "successes": 0, "gain_sum": 0.0, "compile_failures": 1}

    y = q(store, "MATCH (l:Local {key:'gb.y'}) RETURN properties(l) AS p")[0]["p"]
    assert (y["attempts"], y["positives"], y["negatives"]) == (3, 1, 2)
    assert y["gain_sum"] == pytest.approx(0.25)
    ev = {
        r["a"]: r["p"]
        for r in q(
            store,
            "MATCH (:Local {key:'gb.y'})-[e:EVIDENCE_ON]->(u:Gpu) RETURN u.key AS a, properties(e) AS p",
        )
    }
    assert ev["sm_90"] == {"attempts": 2, "positives": 1, "negatives": 1, "gain_sum": pytest.approx(0.25)}
    assert ev["sm_80"] == {"attempts": 1, "positives": 0, "negatives": 1, "gain_sum": 0.0}

    tr = {
        r["a"]: r["p"]
        for r in q(
            store,
            "MATCH (:Global {key:'ga'})-[t:TRANSITION]->(:Global {key:'gb'}) RETURN t.gpu_arch AS a, properties(t) AS p",
        )
    }
    assert set(tr) == {"prior", "sm_90", "sm_80"}
    assert tr["prior"]["count"] == 0 and tr["prior"]["rationale"] == "because"
    assert (tr["sm_90"]["count"], tr["sm_90"]["successes"], tr["sm_90"]["compile_failures"]) == (2, 1, 0)
    assert tr["sm_90"]["gain_sum"] == pytest.approx(0.25)
    assert (tr["sm_80"]["count"], tr["sm_80"]["compile_failures"]) == (1, 1)

    applied = {
        r["k"]: r["pos"]
        for r in q(store, "MATCH (a:Attempt)-[r:APPLIED]->(:Local) RETURN a.key AS k, r.positive AS pos")
    }
    assert applied == {"a1": True, "a2": False, "a3": False}
    links = q(store, "MATCH (a:Attempt {key:'a2'})-[r]->(b) RETURN type(r) AS t, b.key AS b ORDER BY t")
    assert {(r["t"], r["b"]) for r in links} >= {
        ("OF", "task1"),
        ("IN_RUN", "run1"),
        ("CHOSE", "gb"),
        ("FOLLOWS", "a1"),
        ("APPLIED", "gb.y"),
    }
    kernel = q(
        store,
        "MATCH (:Attempt {key:'a1'})-[:PRODUCED]->(k:Kernel) RETURN k.source AS s, k.language AS l, k.key AS key",
    )
    assert kernel[0]["s"] == "good kernel" and kernel[0]["l"] == "triton" and len(kernel[0]["key"]) == 64
    assert q(store, "MATCH (a:Attempt {key:'a3'})-[:PRODUCED]->(k) RETURN count(k) AS n")[0]["n"] == 0
    props = q(store, "MATCH (a:Attempt {key:'a2'}) RETURN properties(a) AS p")[0]["p"]
    assert (
        props["error_kind"] == "hack_detected" and props["positive"] is False and "write_token" not in props
    )

    before = snapshot(store)
    assert memory.record_attempts(store, [good, hack, broken]) == 0  # re-recording is a no-op
    assert memory.record_attempt(store, good) is False
    assert snapshot(store) == before


def test_hack_detected_is_never_positive(store: Any) -> None:
    memory.seed_memory(store, tiny_seed())
    for i, kind in enumerate(["hack_detected", "mismatch", None]):
        memory.record_attempt(
            store,
            attempt(f"h{i}", local_key="gb.y", gain=0.9, error_kind=kind, correct=(kind == "hack_detected")),
        )
    rows = q(store, "MATCH (l:Local {key:'gb.y'}) RETURN l.positives AS p, l.negatives AS n, l.gain_sum AS g")
    assert rows[0] == {"p": 0, "n": 3, "g": 0.0}
    assert q(store, "MATCH ()-[r:APPLIED {positive: true}]->() RETURN count(r) AS n")[0]["n"] == 0


def test_an_infrastructure_failure_is_recorded_but_is_no_evidence(store: Any) -> None:
    memory.seed_memory(store, tiny_seed())
    memory.record_attempt(
        store, attempt("ok", prev_global_key="ga", global_key="gc", local_key=None, gain=0.1)
    )
    infra = attempt(
        "oom",
        prev_global_key="ga",
        global_key="gc",
        local_key=None,
        error_kind="infra_error",
        correct=False,
        gain=0.0,
    )
    assert memory.record_attempt(store, infra) is True
    assert q(store, "MATCH (a:Attempt {key:'oom'}) RETURN a.error_kind AS k") == [{"k": "infra_error"}]
    assert q(store, "MATCH (g:Global {key:'gc'}) RETURN g.attempts AS a")[0]["a"] == 1
    row = q(
        store,
        "MATCH (:Global {key:'ga'})-[t:TRANSITION {gpu_arch:'sm_90'}]->(:Global {key:'gc'}) RETURN t.count AS c",
    )
    assert row == [{"c": 1}]


def test_batch_with_the_same_transition_three_times_counts_three(store: Any) -> None:
    memory.seed_memory(store, tiny_seed())
    batch = [
        attempt(f"t{i}", prev_global_key="ga", global_key="gc", local_key=None, gain=0.1) for i in range(3)
    ]
    assert memory.record_attempts(store, batch) == 3
    row = q(
        store,
        "MATCH (:Global {key:'ga'})-[t:TRANSITION {gpu_arch:'sm_90'}]->(:Global {key:'gc'}) RETURN t.count AS c, t.gain_sum AS g",
    )
    assert row == [{"c": 3, "g": pytest.approx(0.3)}]
    assert q(store, "MATCH (g:Global {key:'gc'}) RETURN g.attempts AS a")[0]["a"] == 3


def test_unknown_key_writes_nothing(store: Any) -> None:
    memory.seed_memory(store, tiny_seed())
    before = snapshot(store)
    with pytest.raises(UnknownKeyError, match="nope"):
        memory.record_attempts(store, [attempt("u1"), attempt("u2", local_key="nope")])
    assert snapshot(store) == before


_WORKER = textwrap.dedent("""
    from pathlib import Path
    from htam_graph import memory
    from htam_graph.model import AttemptRecord

    def open_store(where):
        if where["dialect"] == "neo4j":
            from htam_graph.store.neo4j_store import Neo4jStore
            return Neo4jStore(where["uri"], where["username"], where["password"], database=where["database"])
        from htam_graph.store.falkordb_store import FalkorDBStore
        return FalkorDBStore(Path(where["socket"]), where["graph"])

    def work(where, worker, batches, size, barrier):
        store = open_store(where)
        barrier.wait()
        for b in range(batches):
            recs = [AttemptRecord(key=f"w{worker}-{b}-{i}", run_key=f"r{worker}", task_key="t", step=i,
                                  global_key=("gb", "gc")[i % 2], prev_global_key="ga", local_key=None,
                                  status="improved", compiled=True, correct=True, gain=0.125, gpu_arch="sm_90",
                                  created_ms=1)
                    for i in range(size)]
            memory.record_attempts(store, recs)
            memory.record_attempts(store, recs[:1])  # a duplicate from the same writer: no-op
        store.close()
""")


def _where(store: Any, request: pytest.FixtureRequest) -> dict[str, Any]:
    """How a worker process opens the same graph as `store` (the embedded socket, or the Neo4j settings)."""
    if store.dialect == "neo4j":
        server = request.getfixturevalue("neo4j_server")
        return {
            "dialect": "neo4j",
            "uri": server.uri,
            "username": server.username,
            "password": server.password,
            "database": server.database,
        }
    embedded = request.getfixturevalue("embedded_server")
    return {"dialect": "falkordb", "socket": str(embedded.socket_path), "graph": store.graph_name}


def test_four_processes_lose_no_increment(store: Any, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Four writer processes record 120 attempts at once into one graph (FalkorDB, and Neo4j when configured)."""
    memory.seed_memory(store, tiny_seed())
    (tmp_path / "htam_memory_worker.py").write_text(_WORKER)
    sys.path.insert(0, str(tmp_path))
    try:
        import htam_memory_worker  # type: ignore[import-not-found]

        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(4)
        where = _where(store, request)
        procs = [
            ctx.Process(target=htam_memory_worker.work, args=(where, w, 5, 6, barrier)) for w in range(4)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=180)
        assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("htam_memory_worker", None)
    total = 4 * 5 * 6
    rows = q(
        store,
        "MATCH (:Global {key:'ga'})-[t:TRANSITION {gpu_arch:'sm_90'}]->(b) RETURN b.key AS b, t.count AS c, t.gain_sum AS g ORDER BY b",
    )
    assert [(r["b"], r["c"]) for r in rows] == [("gb", total // 2), ("gc", total // 2)]
    assert sum(r["g"] for r in rows) == pytest.approx(0.125 * total)
    assert q(store, "MATCH (a:Attempt) RETURN count(a) AS n")[0]["n"] == total
    assert q(store, "MATCH (g:Global) RETURN toInteger(sum(g.attempts)) AS n")[0]["n"] == total


def test_reading_locals_examples_and_similar_attempts(store: Any) -> None:
    memory.seed_memory(store, tiny_seed())
    recs = [
        attempt(
            "p1",
            task_key="mm",
            global_key="ga",
            local_key="ga.x",
            gain=0.1,
            kernel_source="k p1",
            speedup_x=1.1,
        ),
        attempt(
            "p2",
            task_key="mm",
            global_key="ga",
            local_key="ga.x",
            gain=0.4,
            kernel_source="k p2",
            speedup_x=1.5,
        ),
        attempt(
            "n1",
            task_key="relu",
            global_key="ga",
            local_key="ga.x",
            status="failed",
            correct=False,
            gain=0.0,
            error_kind="mismatch",
            kernel_source="k n1",
        ),
        attempt(
            "o1",
            task_key="other",
            global_key="gb",
            local_key="gb.y",
            gain=0.3,
            kernel_source="k o1",
            speedup_x=2.0,
        ),
    ]
    memory.record_attempts(store, recs)
    q(store, "MATCH (t:Task {key:'mm'}) SET t.op_tags = ['matmul']")
    q(store, "MATCH (t:Task {key:'relu'}) SET t.op_tags = ['elementwise']")
    q(store, "MATCH (t:Task {key:'other'}) SET t.op_tags = ['matmul', 'reduction']")

    (x,) = memory.locals_for(store, "ga", language="triton", op_tags=["matmul"])
    assert (x.strategy.key, x.attempts, x.positives, x.negatives) == ("ga.x", 3, 2, 1)
    assert x.mean_gain == pytest.approx(0.5 / 3)
    assert (x.best_attempt_key, x.worst_attempt_key) == ("p2", "n1")
    assert x.best_kernel_key == memory.kernel_key(recs[1]) and x.worst_kernel_key == memory.kernel_key(
        recs[2]
    )
    assert memory.locals_for(store, "ga", language="cuda") == []
    assert memory.locals_for(store, "ga", op_tags=["softmax"]) == []
    assert [y.strategy.key for y in memory.locals_for(store, "gb", op_tags=["softmax"])] == [
        "gb.y"
    ]  # no tags: any

    ex = memory.examples_for(store, "ga.x", op_tags=None, limit=5)
    assert [(e.attempt_key, e.positive, e.source) for e in ex] == [
        ("p2", True, "k p2"),
        ("p1", True, "k p1"),
        ("n1", False, "k n1"),
    ]
    assert [e.attempt_key for e in memory.examples_for(store, "ga.x", op_tags=["matmul"], limit=1)] == ["p2"]

    similar = memory.similar_attempts(store, ["matmul"], limit=5, exclude_task_key="mm")
    assert [s.attempt_key for s in similar] == ["o1"]
    ranked = memory.similar_attempts(store, ["matmul", "elementwise"], limit=5)
    assert [s.attempt_key for s in ranked] == ["o1", "p2", "p1", "n1"]  # correct first, then speed-up
    assert [s.positive for s in ranked] == [True, True, True, False]
