"""Crash safety of `memory.record_attempts` on the real engine: a writer killed after any of its statements
leaves pending markers, and `repair_pending` (or the same `Recorder`'s next call) completes every attempt exactly
once -- the graph then equals, property for property, the graph of an uninterrupted recording."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from htam_graph import memory
from htam_graph.memory import recording
from htam_graph.model import AttemptRecord, GlobalDirection, LocalStrategy, SeedMemory, TransitionPrior

STEPS = (
    "attempt_merge",
    "attempt_link",
    "memory_global_stats",
    "memory_local_evidence",
    "memory_transitions",
)


class SimulatedCrash(Exception):
    """Stands for kill -9 between two statements: the statement before it was acknowledged, nothing after."""


class NewProcess:
    """A pass-through GraphStore wrapper: a fresh store object, as the next process after a kill opens one."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)


class CrashAfter:
    """A GraphStore wrapper that dies right after the `nth` run of statement `name` returned."""

    def __init__(self, inner: Any, name: str, nth: int = 1) -> None:
        self.inner, self.name, self.left = inner, name, nth

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def run(self, name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        rows = self.inner.run(name, params)
        if name == self.name:
            self.left -= 1
            if self.left == 0:
                raise SimulatedCrash(name)
        return rows


def seed() -> SeedMemory:
    gl = [GlobalDirection(key=k, name=k.upper(), intent=f"do {k}") for k in ("ga", "gb", "gc")]
    lo = [
        LocalStrategy(key="ga.x", name="x", global_key="ga", languages=["triton"], pattern="p"),
        LocalStrategy(key="gb.y", name="y", global_key="gb", languages=["triton"], pattern="q"),
    ]
    return SeedMemory(
        version=1, globals=gl, locals=lo, transitions=[TransitionPrior(src="ga", dst="gb", rationale="r")]
    )


def att(key: str, **kw: Any) -> AttemptRecord:
    # Gains are dyadic fractions, so float sums are exact in any order and snapshots compare with ==.
    base: dict[str, Any] = dict(
        key=key,
        run_key="run1",
        task_key="task1",
        step=1,
        global_key="gb",
        local_key="gb.y",
        prev_global_key="ga",
        status="improved",
        compiled=True,
        correct=True,
        gain=0.25,
        gpu_arch="sm_90",
        created_ms=1000,
    )
    base.update(kw)
    return AttemptRecord(**base)


def batch_one() -> list[AttemptRecord]:
    """Several attempts per global, local and transition edge (the aggregation case), two architectures, a
    hack, a compile failure, an infrastructure failure (no evidence), kernels and a FOLLOWS chain."""
    return [
        att("a1", kernel_source="k1", kernel_language="triton"),
        att("a2", gain=0.5, error_kind="hack_detected", prev_attempt_key="a1", kernel_source="k2"),
        att("a3", status="failed", compiled=False, correct=False, gain=0.0, error_kind="compile_error"),
        att("a4", gpu_arch="sm_80", gain=0.125, prev_attempt_key="a3"),
        att("a5", global_key="ga", local_key="ga.x", prev_global_key="gc", gain=0.75),
        att("a6", error_kind="infra_error", status="failed", correct=False, gain=0.0),
        att("a7", global_key="gc", local_key=None, prev_global_key=None, gain=0.5, kernel_source="k1"),
    ]


def batch_two() -> list[AttemptRecord]:
    return [att("b1", gain=0.375, run_key="run2"), att("b2", global_key="ga", local_key="ga.x", gain=0.25)]


def q(store: Any, text: str, **params: Any) -> list[dict[str, Any]]:
    return store.run_text(text, params)


def snapshot(store: Any) -> dict[str, Any]:
    """Every property of every node and relationship, order-independent (but the seed's time stamp)."""
    skip = {"SchemaVersion", "HtamTestMarker", "SeedInfo"}
    nodes = q(store, "MATCH (n) RETURN labels(n)[0] AS l, properties(n) AS p")
    rels = q(store, "MATCH (a)-[r]->(b) RETURN a.key AS a, type(r) AS t, properties(r) AS p, b.key AS b")
    return {
        "nodes": sorted((r["l"], sorted(r["p"].items(), key=str)) for r in nodes if r["l"] not in skip),
        "rels": sorted((r["a"], r["t"], r["b"], sorted(r["p"].items(), key=str)) for r in rels),
    }


def pending(store: Any) -> dict[str, list[str]]:
    rows = q(store, "MATCH (a:Attempt) RETURN a.key AS k, properties(a) AS p ORDER BY k")
    marks = {r["k"]: sorted(k for k in r["p"] if k in memory.PENDING_STEPS) for r in rows}
    return {k: v for k, v in marks.items() if v}


def reference(store: Any, *batches: list[AttemptRecord]) -> dict[str, Any]:
    """The snapshot of an uninterrupted recording of `batches`; leaves the graph empty (schema kept)."""
    wipe(store)
    memory.seed_memory(store, seed())
    for b in batches:
        memory.record_attempts(store, b)
    snap = snapshot(store)
    wipe(store)
    memory.seed_memory(store, seed())
    return snap


def wipe(store: Any) -> None:
    q(store, "MATCH (n) WHERE NOT n:SchemaVersion AND NOT n:HtamTestMarker DETACH DELETE n")


@pytest.mark.parametrize("step", STEPS)
def test_repair_after_a_crash_completes_each_attempt_exactly_once(store: Any, step: str) -> None:
    want = reference(store, batch_one())
    with pytest.raises(SimulatedCrash):
        memory.record_attempts(CrashAfter(store, step), batch_one())
    left = pending(store)
    if step == "memory_transitions":  # the last statement was acknowledged: nothing is pending
        assert left == {}
    else:
        assert "a1" in left and snapshot(store) != want  # the crash really left work undone
    assert memory.repair_pending(store) == len(left)
    assert pending(store) == {}
    assert snapshot(store) == want
    assert memory.repair_pending(store) == 0  # a second repair is a no-op
    assert memory.record_attempts(store, batch_one()) == 0  # and re-recording too
    assert snapshot(store) == want
    # Absolute check (the reference went through the same statements): every Attempt holds exactly its
    # record's properties, no marker, no token, nothing dropped by a property removal.
    stored = {r["k"]: r["p"] for r in q(store, "MATCH (a:Attempt) RETURN a.key AS k, properties(a) AS p")}
    for r in batch_one():
        expected = {k: v for k, v in recording._attempt_props(r).items() if k not in memory.PENDING_STEPS}
        assert stored[r.key] == {"key": r.key, **expected}


@pytest.mark.parametrize("step", STEPS[:-1])
def test_another_writer_leaves_them_and_repair_pending_completes_them(store: Any, step: str) -> None:
    """Another process never re-applies a killed writer's attempts while recording its own (on FalkorDB that
    could race a live writer and count twice); repair_pending, run by the CLI where no writer is live, does."""
    want = reference(store, batch_one(), batch_two())
    with pytest.raises(SimulatedCrash):
        memory.record_attempts(CrashAfter(store, step), batch_one())
    left = pending(store)
    assert left
    assert memory.record_attempts(NewProcess(store), batch_two()) == len(batch_two())
    assert pending(store) == left
    assert memory.repair_pending(store) == len(left)
    assert pending(store) == {}
    assert snapshot(store) == want


def test_the_same_recorder_repairs_again_after_its_own_write_failed(store: Any) -> None:
    """A writer whose own recording raised half-way finishes that batch on its recorder's next call."""
    want = reference(store, batch_one(), batch_two())
    memory.record_attempts(store, [])  # nothing to do
    crashing = CrashAfter(store, "memory_global_stats")
    recorder = memory.Recorder(crashing)
    with pytest.raises(SimulatedCrash):
        recorder.record_attempts(batch_one())
    crashing.left = -1  # the same writer carries on (the error was not a kill)
    assert recorder.record_attempts(batch_two()) == len(batch_two())
    assert pending(store) == {}
    assert snapshot(store) == want


def test_markers_follow_the_steps(store: Any) -> None:
    """Each statement clears exactly its own marker (and a non-evidence attempt is marked for links only)."""
    memory.seed_memory(store, seed())
    with pytest.raises(SimulatedCrash):
        memory.record_attempts(CrashAfter(store, "attempt_merge"), batch_one())
    all_steps = ["pend_global", "pend_link", "pend_local", "pend_transition"]
    after_merge = pending(store)
    assert after_merge["a1"] == all_steps
    assert after_merge["a6"] == ["pend_link"]  # infra failure: no evidence
    assert after_merge["a7"] == ["pend_global", "pend_link"]  # no local, no previous direction
    tokens = q(store, "MATCH (a:Attempt) WHERE a.write_token IS NOT NULL RETURN count(a) AS n")[0]["n"]
    assert tokens == len(batch_one())
    wipe(store)
    memory.seed_memory(store, seed())
    with pytest.raises(SimulatedCrash):
        memory.record_attempts(CrashAfter(store, "attempt_link"), batch_one())
    after_link = pending(store)
    assert after_link["a1"] == ["pend_global", "pend_local", "pend_transition"] and "a6" not in after_link
    assert q(store, "MATCH (a:Attempt) WHERE a.write_token IS NOT NULL RETURN count(a) AS n")[0]["n"] == 0
    # The Kernel (whose source the Attempt does not store) was written with the Attempt, so repair can link it.
    kernels = q(store, "MATCH (k:Kernel) RETURN k.source AS s ORDER BY s")
    assert [r["s"] for r in kernels] == ["k1", "k2"]


def test_a_repair_overlapping_applied_attempts_adds_only_the_pending_ones(store: Any) -> None:
    """Writer 1 died after the global stats of its batch, writer 2 right after creating its attempts, both on
    global gb; the repair's global statement sees a mix (some attempts applied, some not) in one key's group."""
    want = reference(store, batch_one(), batch_two())
    with pytest.raises(SimulatedCrash):
        memory.record_attempts(CrashAfter(store, "memory_global_stats"), batch_one())
    with pytest.raises(SimulatedCrash):
        memory.record_attempts(CrashAfter(store, "attempt_merge"), batch_two())
    # Replay every step over BOTH batches, as a stale repair racing a live writer would: only pending
    # attempts count, so nothing is added twice.
    recording.apply_steps(store, batch_one() + batch_two())
    recording.apply_steps(store, batch_one() + batch_two())
    assert pending(store) == {}
    assert snapshot(store) == want
    gb = q(store, "MATCH (g:Global {key:'gb'}) RETURN g.attempts AS n, g.gain_sum AS s")[0]
    assert (gb["n"], gb["s"]) == (4 + 1, 0.25 + 0.125 + 0.375)  # a1..a4 and b1; a6 is no evidence


def test_export_repairs_first(store: Any, tmp_path: Any) -> None:
    from htam_graph import bank

    memory.seed_memory(store, seed())
    with pytest.raises(SimulatedCrash):
        memory.record_attempts(CrashAfter(store, "attempt_link"), batch_one())
    manifest = bank.export_bank(store, tmp_path / "bank.jsonl")
    assert pending(store) == {}
    assert manifest.nodes["Attempt"] == len(batch_one())
    text = (tmp_path / "bank.jsonl").read_text()
    assert "pend_" not in text and "write_token" not in text


def test_falkordb_two_nulls_in_one_set_clause_remove_the_wrong_property(store: Any) -> None:
    """Pins the engine trap attempt_link works around (one null per SET clause, WITH between)."""
    if store.dialect != "falkordb":
        pytest.skip("a FalkorDB trap")
    q(store, "CREATE (:Attempt {key: 'n', a: 1, b: true, c: true, d: true, w: 'tok'})")
    q(store, "MATCH (n:Attempt {key: 'n'}) SET n.b = null WITH n SET n.w = null")
    kept = q(store, "MATCH (n:Attempt {key: 'n'}) RETURN properties(n) AS p")[0]["p"]
    assert sorted(kept) == ["a", "c", "d", "key"]  # the safe form
    q(
        store,
        "UNWIND ['m'] AS k MERGE (n:Attempt {key: k}) ON CREATE SET n += $p, n.w = 'tok'",
        p={"a": 1, "b": True, "c": True, "d": True},
    )
    q(store, "MATCH (n:Attempt {key: 'm'}) SET n.b = null, n.w = null")
    broken = q(store, "MATCH (n:Attempt {key: 'm'}) RETURN properties(n) AS p")[0]["p"]
    assert "w" in broken and "d" not in broken  # the trap: w kept, the unrelated d dropped
