"""The worker's on-disk caches of reference facts: shape-variant selections and the reference's work (SOL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from htam_graph.kernels_runtime import diskcache
from htam_graph.kernels_runtime.worker import compile_baseline_and_sol


def _decode_int(value: Any) -> int | None:
    return value if isinstance(value, int) else None


def test_value_is_computed_once_then_read_back(tmp_path: Path) -> None:
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return 42

    assert diskcache.cached_json(str(tmp_path), "k", compute, _decode_int) == 42
    assert diskcache.cached_json(str(tmp_path), "k", compute, _decode_int) == 42
    assert len(calls) == 1 and diskcache.entry_path(tmp_path, "k").exists()
    assert diskcache.cached_json(str(tmp_path), "other", compute, _decode_int) == 42
    assert len(calls) == 2  # another key is another entry
    assert not list(tmp_path.glob("*.tmp"))  # written through a renamed temporary


def test_corrupt_or_rejected_entries_are_recomputed_and_off_means_off(tmp_path: Path) -> None:
    path = diskcache.entry_path(tmp_path, "k")
    path.write_text("{half", encoding="utf-8")
    assert diskcache.cached_json(str(tmp_path), "k", lambda: 7, _decode_int) == 7
    path.write_text(json.dumps("not an int"), encoding="utf-8")
    assert diskcache.cached_json(str(tmp_path), "k", lambda: 8, _decode_int) == 8
    assert json.loads(path.read_text(encoding="utf-8")) == 8
    assert diskcache.cached_json("", "k", lambda: 9, _decode_int) == 9  # "" turns the cache off


def test_reference_work_key_covers_shapes_dtypes_and_values() -> None:
    a = compile_baseline_and_sol._signature([torch.zeros(2, 3), 4])
    assert a == compile_baseline_and_sol._signature([torch.ones(2, 3), 4])  # values of tensors do not matter
    assert a != compile_baseline_and_sol._signature([torch.zeros(3, 2), 4])
    assert a != compile_baseline_and_sol._signature([torch.zeros(2, 3, dtype=torch.float64), 4])
    assert a != compile_baseline_and_sol._signature([torch.zeros(2, 3), 5])


def test_reference_work_decoder_rejects_what_it_did_not_write() -> None:
    assert compile_baseline_and_sol._decode_work([1.5e9, 4096]) == (1.5e9, 4096)
    for bad in ([1.0], [-1.0, 4], [1.0, -4], ["1", 4], {"flops": 1}, None):
        assert compile_baseline_and_sol._decode_work(bad) is None


def test_reference_work_is_counted_once_per_task_and_shape(tmp_path: Path, monkeypatch: Any) -> None:
    from htam_graph.kernels_runtime.worker import guards, sol
    from htam_graph.kernels_runtime.worker.trials import TrialContext
    from htam_graph.model import EvalRequest, PrecisionPolicy

    ctx = TrialContext(
        device=torch.device("cpu"),
        policy=PrecisionPolicy.FP32_STRICT,
        rtol=1e-4,
        atol=1e-4,
        require_kernel=True,
        counter=guards.LaunchCounter(),
        identities=None,  # type: ignore[arg-type]
        candidate_file="",
    )
    req = EvalRequest(task_key="t", task_source="class Model: ...", candidate_source="", device="cpu")
    ref = torch.nn.Linear(8, 4)
    inputs: list[Any] = [torch.rand(3, 8)]
    monkeypatch.setattr(compile_baseline_and_sol, "SOL_CACHE_DIR", str(tmp_path))
    assert compile_baseline_and_sol._reference_work(req, ctx, ref, inputs) == (2.0 * 3 * 8 * 4, 3 * 4 * 4)

    def not_again(*_: Any) -> float:
        raise AssertionError("the reference's FLOPs were counted again")

    monkeypatch.setattr(sol, "count_flops", not_again)
    assert compile_baseline_and_sol._reference_work(req, ctx, ref, [torch.rand(3, 8)]) == (
        192.0,
        48,
    )  # read back
    other = req.model_copy(update={"task_source": "class Model: pass"})
    with pytest.raises(AssertionError, match="counted again"):  # another task source is another entry
        compile_baseline_and_sol._reference_work(other, ctx, ref, inputs)
