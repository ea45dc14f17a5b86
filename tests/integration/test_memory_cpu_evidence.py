"""CPU attempts (Triton interpreted) are recorded but never evidence, on the real embedded FalkorDB; what an older
version counted is moved out (`memory.repair_cpu_evidence`), also by a bank import; "correct but not faster"
is counted apart from "failed".

An older writer is simulated by recording under the old rule (`is_evidence` = not an infrastructure failure),
which is exactly what that version wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from htam_graph import bank, memory, policy
from htam_graph.memory import recording, repair
from htam_graph.model import AttemptRecord, ErrorKind, GlobalDirection, LocalStrategy, SeedMemory
from htam_graph.settings import PolicySettings

SEED = SeedMemory(
    version=1,
    globals=[GlobalDirection(key=k, name=k, intent=k) for k in ("ga", "gb")],
    locals=[LocalStrategy(key="gb.y", name="y", global_key="gb", languages=["triton"], pattern="p")],
)


def _attempt(key: str, arch: str, status: str, gain: float = 0.0, **kw: Any) -> AttemptRecord:
    ok = status != "failed"
    values: dict[str, Any] = dict(
        key=key, run_key=f"run-{arch}", task_key="task", step=int(key[-1]), global_key="gb", local_key="gb.y",
        prev_global_key="ga", status=status, compiled=ok, correct=ok, gain=gain, gpu_arch=arch,
        error_kind=None if ok else ErrorKind.MISMATCH, created_ms=int(key[-1]),
        kernel_source=f"kernel {key}", kernel_language="triton",
    )  # fmt: skip
    values.update(kw)
    return AttemptRecord(**values)


GPU = [
    _attempt("g1", "sm_90", "improved", 0.4),
    _attempt("g2", "sm_90", "correct", -0.1),
    _attempt("g3", "sm_90", "failed"),
]
CPU = [
    _attempt("c1", "cpu", "correct", device="cpu"),
    _attempt("c2", "cpu", "correct"),
    _attempt("c3", "cpu", "failed"),
]


def _old_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "is_evidence", lambda r: r.error_kind is not ErrorKind.INFRA_ERROR)


def _stats(store: Any) -> dict[str, Any]:
    def rows(text: str) -> list[Any]:
        return sorted(
            tuple(round(v, 9) if isinstance(v, float) else v for v in r.values())
            for r in store.run_text(text)
        )

    return {
        "globals": rows(
            "MATCH (g:Global) RETURN g.key, g.attempts, g.successes, g.gain_sum, g.compile_failures"
        ),
        "locals": rows("MATCH (l:Local) RETURN l.key, l.attempts, l.positives, l.negatives, l.gain_sum"),
        "transitions": rows(
            "MATCH (a)-[t:TRANSITION]->(b) RETURN a.key, b.key, t.gpu_arch, t.count, t.gain_sum, t.compile_failures"
        ),
        "stats_on": rows("MATCH (a)-[t:STATS_ON]->(b) RETURN a.key, b.key, t.attempts, t.gain_sum"),
        "evidence_on": rows("MATCH (a)-[t:EVIDENCE_ON]->(b) RETURN a.key, b.key, t.attempts, t.negatives"),
    }


@pytest.fixture
def make(store_factory: Callable[..., Any]) -> Callable[[], Any]:
    def fresh() -> Any:
        st = store_factory()
        memory.seed_memory(st, SEED)
        return st

    return fresh


def test_cpu_attempts_are_recorded_but_add_no_evidence(make: Callable[[], Any]) -> None:
    gpu_only, mixed = make(), make()
    memory.record_attempts(gpu_only, GPU)
    assert memory.record_attempts(mixed, GPU + CPU) == 6  # every attempt is stored ...
    assert _stats(mixed) == _stats(gpu_only)  # ... and the CPU ones change no statistic
    assert not mixed.run_text("MATCH ()-[e]->(:Gpu {key: 'cpu'}) RETURN e")
    assert mixed.run_text("MATCH (a:Attempt {key: 'c1'}) RETURN a.device AS d") == [{"d": "cpu"}]
    applied = mixed.run_text("MATCH (a:Attempt)-[:APPLIED]->(:Local) RETURN count(a) AS n")
    assert applied == [{"n": 6}]  # the records still say which strategy each attempt applied
    settings = PolicySettings()
    for mode in (policy.PolicyMode.HTG, policy.PolicyMode.NO_TRANSITION):
        mixed_scores, gpu_scores = (
            memory.score_directions(st, ["ga"], gpu_arch="sm_90", settings=settings, mode=mode)
            for st in (mixed, gpu_only)
        )
        assert mixed_scores == gpu_scores
    examples = memory.examples_for(mixed, "gb.y", limit=10)  # CPU attempts applied it too: never examples
    assert {e.attempt_key for e in examples} == {"g1", "g2", "g3"}
    local = memory.locals_for(mixed, "gb")[0]
    assert local.worst_attempt_key == "g2" and local.attempts == 3  # g2 slowed the kernel down: worst gain


def test_correct_but_not_faster_is_its_own_label_and_cpu_is_left_out(make: Callable[[], Any]) -> None:
    st = make()
    memory.record_attempts(st, GPU + CPU + [_attempt("f4", "sm_80", "correct", 0.0)])
    [local] = memory.with_outcomes(st, memory.locals_for(st, "gb"))
    by_arch = {a.gpu_arch: a for a in local.by_arch}
    assert set(by_arch) == {"sm_90", "sm_80"}
    here = by_arch["sm_90"]
    assert (here.improved, here.correct, here.failed) == (1, 1, 1)
    assert here.gain_sum == pytest.approx(0.3)
    assert (by_arch["sm_80"].correct, by_arch["sm_80"].failed) == (1, 0)


def test_repair_moves_out_what_an_older_version_counted(
    make: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    clean, old = make(), make()
    memory.record_attempts(clean, GPU)
    with monkeypatch.context() as m:
        _old_rule(m)
        memory.record_attempts(old, GPU + CPU)
    assert old.run_text("MATCH ()-[e]->(:Gpu {key: 'cpu'}) RETURN count(e) AS n") == [{"n": 2}]
    assert _stats(old) != _stats(clean)  # the corruption the study found: CPU attempts as evidence
    assert memory.repair_cpu_evidence(old) == 3  # STATS_ON, EVIDENCE_ON, one TRANSITION edge
    assert _stats(old) == _stats(clean)
    assert memory.repair_cpu_evidence(old) == 0  # nothing left: a second run changes nothing


def test_a_cpu_attempt_an_older_writer_left_pending_is_linked_and_never_counted(
    make: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    clean, st = make(), make()
    memory.record_attempts(clean, GPU)
    memory.record_attempts(st, GPU)
    with monkeypatch.context() as m:
        _old_rule(m)  # the old writer marked its CPU attempt for every step, then was killed after the merge
        st.run("attempt_merge", {"rows": [recording._merge_row(CPU[0])], "token": "t"})
    assert st.run_text("MATCH (a:Attempt {key: 'c1'}) RETURN a.pend_local AS p") == [{"p": True}]
    assert memory.repair_pending(st) == 1
    assert _stats(st) == _stats(clean)
    assert st.run("attempt_pending", {"after": "", "limit": 10}) == []  # no marker left behind
    assert st.run_text("MATCH (:Attempt {key: 'c1'})-[:APPLIED]->(l:Local) RETURN l.key AS k") == [
        {"k": "gb.y"}
    ]


def test_bank_import_repairs_an_old_bank_and_the_receiving_graph(
    make: Callable[[], Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean = make()
    memory.record_attempts(clean, GPU)
    old_source, old_target = make(), make()
    path = tmp_path / "old.jsonl"
    with monkeypatch.context() as m:
        _old_rule(m)
        memory.record_attempts(old_source, GPU + CPU)
        memory.record_attempts(old_target, CPU)
        m.setattr(repair, "repair_cpu_evidence", lambda store: 0)  # an old version exported it as it was
        bank.export_bank(old_source, path)
    assert '"key":"cpu"' in path.read_text()  # the old bank carries CPU evidence edges
    fresh = make()
    counts = bank.import_bank(fresh, path)
    assert counts.attempts_new == 6
    assert _stats(fresh) == _stats(clean)
    bank.import_bank(old_target, path)  # the receiving graph's own old CPU evidence is moved out too
    assert _stats(old_target) == _stats(clean)
