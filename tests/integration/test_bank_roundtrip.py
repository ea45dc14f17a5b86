"""Memory-bank export/import on the real embedded FalkorDB: round trip, idempotency, merging, refusals."""

from __future__ import annotations

import gzip
import json
import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from htam_graph import bank, memory
from htam_graph.errors import BankFormatError
from htam_graph.model import AttemptRecord, GlobalDirection, LocalStrategy, SeedMemory, TransitionPrior

SEED = SeedMemory(
    version=1,
    globals=[GlobalDirection(key=k, name=k, intent=k, goals=["g"]) for k in ("ga", "gb", "gc")],
    locals=[LocalStrategy(key="gb.y", name="y", global_key="gb", languages=["triton"], pattern="p")],
    transitions=[TransitionPrior(src="ga", dst="gb", rationale="why", risks=["r"])],
)
stats = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]("bank_stats").stats


def attempts(prefix: str, n: int, arch: str = "sm_90") -> list[AttemptRecord]:
    out = []
    for i in range(n):
        ok = i % 3 != 2
        out.append(
            AttemptRecord(
                key=f"{prefix}{i}",
                run_key=f"{prefix}run",
                task_key=f"task{i % 2}",
                step=i,
                global_key=("gb", "gc")[i % 2],
                local_key="gb.y" if i % 2 == 0 else None,
                prev_global_key="ga" if i else None,
                prev_attempt_key=f"{prefix}{i - 1}" if i else None,
                status="improved" if ok else "failed",
                compiled=ok,
                correct=ok,
                gain=0.1 * (i + 1) if ok else 0.0,
                error_kind=None if ok else "compile_error",
                gpu_arch=arch,
                created_ms=100 + i,
                kernel_source=f"kernel {prefix}{i}" if ok else None,
                kernel_language="triton" if ok else None,
            )
        )
    return out


@pytest.fixture
def source(store_factory: Callable[..., Any]) -> Any:
    st = store_factory()
    memory.seed_memory(st, SEED)
    memory.record_attempts(st, attempts("a", 7))
    return st


def test_export_then_import_into_an_empty_graph_is_identical(
    source: Any, store_factory: Callable[..., Any], tmp_path: Path
) -> None:
    path = tmp_path / "bank.jsonl"
    manifest = bank.export_bank(source, path)
    assert manifest.nodes["Attempt"] == 7 and manifest.relationships["TRANSITION"] >= 2
    assert bank.manifest_path(path).exists()
    first = json.loads(path.read_text().splitlines()[0])
    assert set(first) == {"type", "id", "labels", "properties"} and first["type"] == "node"
    target = store_factory()
    counts = bank.import_bank(target, path)
    assert (counts.attempts_new, counts.attempts_known, counts.priors) == (7, 0, 1)
    assert stats(target) == stats(source)
    again = bank.export_bank(target, tmp_path / "again.jsonl")
    assert again.sha256 == manifest.sha256  # same graph, same bytes


def test_gzip_bank_is_the_same_bank_compressed(
    source: Any, store_factory: Callable[..., Any], tmp_path: Path
) -> None:
    plain = bank.export_bank(source, tmp_path / "bank.jsonl")
    path = tmp_path / "bank.jsonl.gz"
    packed = bank.export_bank(source, path)
    assert path.read_bytes()[:2] == b"\x1f\x8b" and bank.manifest_path(path).exists()
    assert gzip.decompress(path.read_bytes()) == (tmp_path / "bank.jsonl").read_bytes()
    assert (packed.sha256, packed.lines) == (plain.sha256, plain.lines)  # of the uncompressed lines
    again = tmp_path / "again.jsonl.gz"
    bank.export_bank(source, again)
    assert again.read_bytes() == path.read_bytes()  # no file name or mtime in the gzip header
    target = store_factory()
    counts = bank.import_bank(target, path)
    assert (counts.attempts_new, counts.attempts_known) == (7, 0)
    assert stats(target) == stats(source)


def test_truncated_gzip_bank_is_refused_with_nothing_written(
    source: Any, store_factory: Callable[..., Any], tmp_path: Path
) -> None:
    path = tmp_path / "bank.jsonl.gz"
    bank.export_bank(source, path)
    path.write_bytes(path.read_bytes()[:-40])
    target = store_factory()
    before = target.run_text("MATCH (n) RETURN count(n) AS n")[0]["n"]
    with pytest.raises(BankFormatError, match="gzip") as info:
        bank.import_bank(target, path)
    assert "\n" not in str(info.value)
    assert target.run_text("MATCH (n) RETURN count(n) AS n")[0]["n"] == before


def test_reimport_is_a_no_op(source: Any, tmp_path: Path) -> None:
    path = tmp_path / "bank.jsonl"
    bank.export_bank(source, path)
    before = stats(source)
    counts = bank.import_bank(source, path)
    assert (counts.attempts_new, counts.attempts_known) == (0, 7)
    assert stats(source) == before


def test_two_banks_merge_by_adding(source: Any, store_factory: Callable[..., Any], tmp_path: Path) -> None:
    other = store_factory()
    memory.seed_memory(other, SEED)
    memory.record_attempts(other, attempts("b", 5, arch="sm_80"))
    bank.export_bank(source, tmp_path / "a.jsonl")
    bank.export_bank(other, tmp_path / "b.jsonl")
    merged = store_factory()
    bank.import_bank(merged, tmp_path / "a.jsonl")
    bank.import_bank(merged, tmp_path / "b.jsonl")
    both = store_factory()
    memory.seed_memory(both, SEED)
    memory.record_attempts(both, attempts("a", 7) + attempts("b", 5, arch="sm_80"))
    assert stats(merged) == stats(both)
    gb = merged.run_text("MATCH (g:Global {key:'gb'}) RETURN g.attempts AS n")[0]["n"]
    assert gb == 4 + 3


def _corrupt_cases(path: Path) -> dict[str, Callable[[], None]]:
    text = path.read_text()
    mpath = bank.manifest_path(path)
    manifest = json.loads(mpath.read_text())

    def bad_sha() -> None:
        path.write_text(text.replace('"gain"', '"gainx"', 1))

    def truncated() -> None:
        cut = text[: len(text) - 40]
        path.write_text(cut)
        m = dict(manifest, sha256=__import__("hashlib").sha256(cut.encode()).hexdigest())
        mpath.write_text(json.dumps(m))

    def newer_format() -> None:
        mpath.write_text(json.dumps(dict(manifest, format_version=bank.FORMAT_VERSION + 1)))

    def newer_schema() -> None:
        mpath.write_text(json.dumps(dict(manifest, schema_version=(manifest["schema_version"] or 0) + 50)))

    def wrong_counts() -> None:
        mpath.write_text(json.dumps(dict(manifest, nodes={**manifest["nodes"], "Attempt": 99})))

    def no_manifest() -> None:
        mpath.unlink()

    return {
        "bad sha256": bad_sha,
        "truncated line": truncated,
        "newer format": newer_format,
        "newer schema": newer_schema,
        "wrong counts": wrong_counts,
        "no manifest": no_manifest,
    }


@pytest.mark.parametrize(
    "case", ["bad sha256", "truncated line", "newer format", "newer schema", "wrong counts", "no manifest"]
)
def test_corrupt_bank_is_refused_with_nothing_written(
    case: str, source: Any, store_factory: Callable[..., Any], tmp_path: Path
) -> None:
    path = tmp_path / "bank.jsonl"
    bank.export_bank(source, path)
    _corrupt_cases(path)[case]()
    target = store_factory()
    before = target.run_text("MATCH (n) RETURN count(n) AS n")[0]["n"]
    with pytest.raises(BankFormatError) as info:
        bank.import_bank(target, path)
    assert "\n" not in str(info.value)
    assert target.run_text("MATCH (n) RETURN count(n) AS n")[0]["n"] == before


def test_bank_travels_to_every_backend_and_back(
    source: Any, store: Any, store_factory: Callable[..., Any], tmp_path: Path
) -> None:
    """Embedded -> `store` (Neo4j too when NEO4J_URI is set) -> embedded keeps every count and sum."""
    bank.export_bank(source, tmp_path / "out.jsonl")
    bank.import_bank(store, tmp_path / "out.jsonl")
    assert stats(store) == stats(source)
    bank.export_bank(store, tmp_path / "back.jsonl")
    home = store_factory()
    bank.import_bank(home, tmp_path / "back.jsonl")
    assert stats(home) == stats(source)
