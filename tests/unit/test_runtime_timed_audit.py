"""How the timed phase uses the stream audit (kernels_runtime/worker/time_candidate.py `timed_and_audited`), on the CPU.

The CUDA timer and the profiler need a GPU (`benchmarks/timing_protocol.py` checks them on the H200); here they are
replaced by fakes that return what the GPU would, so the decisions around them run in CI: work outside the window
fails the candidate with `caller_stream`, a clean audit passes it, a blind profiler (no CUPTI) re-times everything
with the synchronise inside the window, and the CPU path never audits."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from htam_graph.kernels_runtime.recorder import Recorder
from htam_graph.kernels_runtime.worker import time_candidate, timing_protocol
from htam_graph.kernels_runtime.worker.execution import CandidateFailure
from htam_graph.model import ErrorKind, EvalRequest

GPU = torch.device("cuda", 0)  # never touched: the timer and the profiler are fakes


def _request() -> EvalRequest:
    return EvalRequest(
        task_key="t", task_source="", candidate_source="", device="cuda", timing_runs=4, warmup_runs=1
    )


def _fake_timing(monkeypatch: pytest.MonkeyPatch, audit: timing_protocol.StreamAudit) -> list[str]:
    """Replace the GPU timer and the profiler; return the protocols the timer was asked for, in order."""
    protocols: list[str] = []

    def fake_time(fns: dict[str, Any], device: torch.device, runs: int, warmup: int,
                  protocol: str = timing_protocol.HEAD_START) -> timing_protocol.Timings:  # fmt: skip
        protocols.append(protocol)
        return timing_protocol.Timings(
            samples_us={n: [100.0] * runs for n in fns}, wall_us={n: [110.0] * runs for n in fns},
            protocol=protocol, head_start_us={n: 1000.0 for n in fns}, cycles_per_us=1980.0,
        )  # fmt: skip

    def fake_audit(fn: Any, head_start_us: float, cycles_per_us: float) -> timing_protocol.StreamAudit:
        assert head_start_us == 1000.0 and cycles_per_us == 1980.0  # the candidate's measured head start
        return audit

    monkeypatch.setattr(timing_protocol, "time_interleaved", fake_time)
    monkeypatch.setattr(timing_protocol, "audit_streams", fake_audit)
    return protocols


FNS = {"ref": lambda: None, "cand": lambda: None}


def test_work_outside_the_window_fails_the_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    escaped = timing_protocol.StreamAudit(caller=7, activities=1, other_streams=1,
                                 escaped=["tanh_kernel (stream 13) ended after the end"])  # fmt: skip
    _fake_timing(monkeypatch, escaped)
    with pytest.raises(CandidateFailure) as info:
        time_candidate.timed_and_audited(FNS, _request(), Recorder(_request()), GPU)
    assert info.value.kind is ErrorKind.HACK_DETECTED and info.value.check == "caller_stream"
    assert "tanh_kernel (stream 13) ended after the end" in str(info.value)


def test_a_clean_audit_keeps_the_head_start_times(monkeypatch: pytest.MonkeyPatch) -> None:
    protocols = _fake_timing(
        monkeypatch, timing_protocol.StreamAudit(caller=7, activities=989, other_streams=972)
    )
    rec = Recorder(_request())
    t = time_candidate.timed_and_audited(FNS, _request(), rec, GPU)
    assert protocols == [timing_protocol.HEAD_START] and t.protocol == timing_protocol.HEAD_START
    assert (
        rec.checks["caller_stream"].startswith("pass: 989 GPU activities")
        and "forked and joined" in rec.checks["caller_stream"]
    )


def test_a_blind_profiler_falls_back_to_sync_in_window(monkeypatch: pytest.MonkeyPatch) -> None:
    protocols = _fake_timing(monkeypatch, timing_protocol.StreamAudit(caller=None, activities=0))
    rec = Recorder(_request())
    t = time_candidate.timed_and_audited(FNS, _request(), rec, GPU)
    assert (
        protocols == [timing_protocol.HEAD_START, timing_protocol.SYNC_IN_WINDOW]
        and t.protocol == timing_protocol.SYNC_IN_WINDOW
    )
    assert rec.checks["caller_stream"].startswith("skipped") and rec.checks["timing_fallback"].startswith(
        "info"
    )


def test_the_cpu_path_never_audits(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_audit(*args: Any) -> timing_protocol.StreamAudit:
        raise AssertionError("the CPU path must not run the profiler audit")

    monkeypatch.setattr(timing_protocol, "audit_streams", no_audit)
    rec = Recorder(_request())
    t = time_candidate.timed_and_audited(FNS, _request(), rec, torch.device("cpu"))
    assert t.on_cpu and t.protocol == timing_protocol.CPU_PERF_COUNTER and len(t.samples_us["cand"]) == 4
    assert rec.checks["caller_stream"] == "skipped: CPU: one stream"
