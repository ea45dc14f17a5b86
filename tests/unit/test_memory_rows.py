"""Recording logic against a scripted fake store: evidence polarity, per-key pre-aggregation, idempotency,
and a lint of every memory/policy/bank Cypher file (declared = used parameters, portable subset only)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest

from htam_graph import memory, queries
from htam_graph.errors import UnknownKeyError
from htam_graph.model import AttemptRecord

MINE = ("seed_", "policy_", "memory_", "attempt_", "bank_")


class FakeStore:
    """Answers the statements record_attempts runs; remembers every call."""

    dialect = "falkordb"

    def __init__(
        self, known_attempts: frozenset[str] = frozenset(), missing: frozenset[str] = frozenset()
    ) -> None:
        self.known = set(known_attempts)
        self.missing = set(missing)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def run(self, name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        p = dict(params or {})
        queries.check_params(queries.load(name), p)
        self.calls.append((name, p))
        if name == "memory_key_check":
            return [
                {"label": lbl, "key": k, "found": k not in self.missing}
                for lbl, keys in (("Global", p["globals"]), ("Local", p["locals"]), ("Gpu", p["gpus"]))
                for k in keys
            ]
        if name == "attempt_merge":
            rows = [{"key": r["key"], "created": r["key"] not in self.known} for r in p["rows"]]
            self.known.update(r["key"] for r in p["rows"])
            return rows
        return []

    def names(self) -> list[str]:
        return [n for n, _ in self.calls]

    def params(self, name: str) -> dict[str, Any]:
        return next(p for n, p in self.calls if n == name)


def rec(key: str, **kw: Any) -> AttemptRecord:
    base: dict[str, Any] = dict(
        key=key,
        run_key="r",
        task_key="t",
        step=1,
        global_key="g",
        status="improved",
        compiled=True,
        correct=True,
        gain=0.2,
        gpu_arch="sm_90",
        created_ms=7,
    )
    base.update(kw)
    return AttemptRecord(**base)


@pytest.mark.parametrize(
    ("kw", "positive", "gain"),
    [
        ({}, True, 0.2),
        ({"error_kind": "hack_detected"}, False, 0.0),
        ({"status": "correct", "gain": -0.1}, False, -0.1),
        ({"status": "improved", "gain": 0.0}, False, 0.0),
        ({"correct": False, "error_kind": "mismatch", "status": "failed"}, False, 0.0),
        (
            {"compiled": False, "correct": False, "status": "failed", "error_kind": "compile_error"},
            False,
            0.0,
        ),
    ],
)
def test_evidence_polarity_and_counted_gain(kw: dict[str, Any], positive: bool, gain: float) -> None:
    r = rec("a", **kw)
    assert memory.is_positive(r) is positive
    assert memory.counted_gain(r) == pytest.approx(gain)


def test_batch_rows_are_per_attempt_and_marked_pending() -> None:
    """Per-key aggregation moved into the statements (after the pending filter): rows are one per attempt, and
    attempt_merge marks each new attempt with exactly the steps that apply to it."""
    store = FakeStore(missing=frozenset({"sm_80"}))  # sm_90 has its Gpu node already
    batch = [
        rec(f"a{i}", prev_global_key="p", local_key="g.x", gpu_arch=("sm_90", "sm_90", "sm_80")[i])
        for i in range(3)
    ]
    batch.append(rec("inf", error_kind="infra_error", status="failed", correct=False, gain=0.0))
    assert memory.record_attempts(store, batch) == 4
    assert store.names() == [
        "memory_key_check",
        "memory_gpu_merge",
        "attempt_merge",
        "attempt_link",
        "memory_global_stats",
        "memory_local_evidence",
        "memory_transitions",
    ]
    trans = store.params("memory_transitions")["rows"]
    assert [(r["key"], r["src"], r["dst"], r["gpu_arch"]) for r in trans] == [
        ("a0", "p", "g", "sm_90"),
        ("a1", "p", "g", "sm_90"),
        ("a2", "p", "g", "sm_80"),
    ]
    glob = store.params("memory_global_stats")["rows"]
    assert [(g["key"], g["global_key"], g["successes"]) for g in glob] == [
        (f"a{i}", "g", 1) for i in range(3)
    ]
    assert all(isinstance(g["gain_sum"], float) and g["gain_sum"] == pytest.approx(0.2) for g in glob)
    assert [r["key"] for r in store.params("attempt_link")["rows"]] == ["a0", "a1", "a2", "inf"]
    marks = {
        r["key"]: sorted(k for k in r["props"] if k.startswith("pend_"))
        for r in store.params("attempt_merge")["rows"]
    }
    assert marks["a0"] == ["pend_global", "pend_link", "pend_local", "pend_transition"]
    assert marks["inf"] == [
        "pend_link"
    ]  # an infrastructure failure is no evidence: only its links are pending
    assert store.params("memory_gpu_merge")["keys"] == ["sm_80"]  # only the missing Gpu is created


def test_known_attempts_add_no_stats() -> None:
    store = FakeStore(known_attempts={"a0"})
    assert (
        memory.record_attempts(store, [rec("a0", prev_global_key="p"), rec("a1", prev_global_key="p")]) == 1
    )
    assert [r["key"] for r in store.params("attempt_link")["rows"]] == ["a1"]
    assert [r["key"] for r in store.params("memory_transitions")["rows"]] == ["a1"]
    store.calls.clear()
    assert memory.record_attempts(store, [rec("a0"), rec("a1")]) == 0
    assert "attempt_link" not in store.names() and "memory_global_stats" not in store.names()


def test_unknown_keys_stop_before_any_write() -> None:
    store = FakeStore(missing={"g.nope"})
    with pytest.raises(UnknownKeyError, match="g.nope"):
        memory.record_attempts(store, [rec("a", local_key="g.nope")])
    assert store.names() == ["memory_key_check"]


def test_duplicate_keys_in_a_batch_and_reserved_arch() -> None:
    store = FakeStore()
    assert memory.record_attempts(store, [rec("a"), rec("a")]) == 1
    with pytest.raises(ValueError, match="share the key"):
        memory.record_attempts(FakeStore(), [rec("a"), rec("a", gain=0.3)])
    with pytest.raises(ValueError, match="reserved"):
        memory.record_attempts(FakeStore(), [rec("a", gpu_arch="prior")])


def test_missing_creation_time_is_one_stamp_for_all_statements() -> None:
    store = FakeStore()
    memory.record_attempts(store, [rec("a", created_ms=0)])
    stamp = store.params("attempt_merge")["rows"][0]["props"]["created_ms"]
    assert stamp > 0 and store.params("attempt_link")["rows"][0]["created_ms"] == stamp


_FORBIDDEN = [
    r"elementId\s*\(",
    r"\bid\s*\(",
    r"datetime\s*\(",
    r"\bdate\s*\(",
    r"duration\s*\(",
    r"=~",
    r"EXISTS\s*\{",
    r"COUNT\s*\{",
    r"COLLECT\s*\{",
    r"\bCALL\b",
    r"IN TRANSACTIONS",
    r"apoc\.",
    r"CREATE\s+(CONSTRAINT|INDEX)",
    r"toString\s*\(",
    r"toFloat\s*\(",
    r"\bSHOW\b",
    r"round\s*\(",
    r":\w+\|",
    r"CREATE\s*\(\w*(:\w+)?\s*\$",
]


@pytest.mark.parametrize("name", [n for n in queries.names() if n.startswith(MINE)])
def test_cypher_file_is_portable_and_declares_its_parameters(name: str) -> None:
    query = queries.load(name)
    assert query.used_params() == query.params, name
    body = queries.strip_comments(query.text)
    for pattern in _FORBIDDEN:
        assert not re.search(pattern, body, flags=re.IGNORECASE), (name, pattern)
    if "ORDER BY" in body.upper() and "LIMIT" in body.upper():
        assert re.search(r"(key|candidate|attempt_key|gpu_arch)\s+ASC", body), (
            f"{name}: ORDER BY needs a tie-break"
        )


def test_known_gpu_nodes_are_not_merged_again() -> None:
    store = FakeStore()
    memory.record_attempts(store, [rec("a")])
    assert "memory_gpu_merge" not in store.names()
