"""The timed phase of an evaluation: interleaved timing, the recheck after timing, the speed-of-light floor."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable
from typing import Any

import torch

from htam_graph.kernels_runtime.recorder import Recorder
from htam_graph.kernels_runtime.worker import checks, guards, timing_protocol
from htam_graph.kernels_runtime.worker.compile_baseline_and_sol import compiled_reference, speed_of_light
from htam_graph.kernels_runtime.worker.execution import CandidateFailure, candidate_call, make_inputs
from htam_graph.kernels_runtime.worker.sharing import exclusive, shared
from htam_graph.kernels_runtime.worker.trials import (
    TrialContext,
    attributed,
    run_trial,
    trial_seed,
    verify_guards,
)
from htam_graph.model import ErrorKind, EvalRequest

__all__ = ["time_and_recheck", "timed_and_audited"]


def timed_and_audited(
    fns: dict[str, Callable[[], object]], req: EvalRequest, rec: Recorder, device: torch.device
) -> timing_protocol.Timings:
    """Time the callables (`fns["cand"]` is the candidate), then audit one candidate call's streams (GPU).

    Work outside the caller's window is `hack_detected` (check `caller_stream`). When the profiler sees no GPU
    activity (no CUPTI), the audit vouches for nothing and everything is timed again sync-in-window."""
    t = timing_protocol.time_interleaved(fns, device, req.timing_runs, req.warmup_runs)
    if t.on_cpu:
        rec.skip("caller_stream", "CPU: one stream")
        return t
    # After the timed loop, so the profiler cannot perturb it; a side-stream candidate fails either way.
    audit = timing_protocol.audit_streams(fns["cand"], t.head_start_us["cand"], t.cycles_per_us)
    if audit.observed:
        problem = audit.problem()
        if problem:
            raise CandidateFailure(ErrorKind.HACK_DETECTED, "caller_stream", problem)
        rec.ok("caller_stream", audit.describe())
        return t
    rec.info("timing_fallback", "the profiler saw no GPU activity; timed again with sync-in-window")
    rec.skip("caller_stream", "no GPU activity in the profiler; sync-in-window timing instead")
    return timing_protocol.time_interleaved(
        fns, device, req.timing_runs, req.warmup_runs, timing_protocol.SYNC_IN_WINDOW
    )


def time_and_recheck(
    req: EvalRequest,
    rec: Recorder,
    ctx: TrialContext,
    task: types.ModuleType,
    ref: Any,
    cand: Any,
    phase: Callable[[str], contextlib.AbstractContextManager[None]],
) -> None:
    """Time candidate, eager reference and torch.compile interleaved (alone on the GPU), then re-check the
    candidate on the timing storage refilled and on fresh storage, then the speed-of-light floor."""
    seed = trial_seed(req, 0, 500)
    with shared(ctx.device):
        inputs = make_inputs(task, seed, ctx.device)
        ref_inputs, cand_inputs = checks.clone_inputs(inputs), checks.clone_inputs(inputs)
    per_call: list[int] = []

    def run_ref() -> None:
        with torch.no_grad():
            ref(*ref_inputs)

    def run_cand() -> None:
        before = ctx.counter.total
        with torch.no_grad():
            candidate_call(lambda: cand(*cand_inputs), ctx.candidate_file, "the candidate raised while timed")
        per_call.append(ctx.counter.total - before)

    fns: dict[str, Any] = {"ref": run_ref, "cand": run_cand}
    # No lock around the torch.compile warm-up: Inductor compiles on the CPU for tens of seconds under a loaded
    # bench, and holding the shared lock that long would stall every other worker's timing on the GPU past its
    # timeout. Its one warm-up forward may overlap another worker's timed window; the median of 20 absorbs it.
    with phase("torch_compile"):
        compiled = compiled_reference(req, rec, ctx, ref, ref_inputs)
    if compiled is not None:
        fns["compile"] = compiled
    guards.pin_precision(req.precision_policy)
    with (
        phase("timing"),
        exclusive(ctx.device),
    ):  # alone on the GPU: no other bench worker's kernels inside the timed windows
        t = timed_and_audited(fns, req, rec, ctx.device)
    rec.set(timing_method=t.protocol)
    verify_guards(ctx)
    if ctx.require_kernel and min(per_call) == 0:
        raise CandidateFailure(
            ErrorKind.HACK_DETECTED, "kernel_launched", "a timed call launched no custom kernel"
        )
    _, iqr = timing_protocol.summarise(t.samples_us["cand"])
    median, ref_us = t.time_us("cand"), t.time_us("ref")
    rec.set(runtimes_us=t.samples_us["cand"], runtime_us=median, runtime_spread_us=iqr, ref_eager_us=ref_us,
            speedup_eager_x=ref_us / median if median > 0 else None)  # fmt: skip
    if "compile" in t.samples_us:
        comp_us = t.time_us("compile")
        rec.set(ref_compile_us=comp_us, speedup_compile_x=comp_us / median if median > 0 else None)
    problem = t.wall_problem("cand")
    if problem:
        raise CandidateFailure(ErrorKind.HACK_DETECTED, "device_sync", problem)
    rec.ok("device_sync", t.describe("cand"))
    # Recheck (pitfalls 3, 12): fresh values in the very storage used for timing, then fresh storage.
    with attributed("recheck_after_timing"), phase("recheck"), shared(ctx.device):
        run_trial(
            ctx,
            task,
            ref,
            cand,
            trial_seed(req, 0, 501),
            "recheck after timing (same storage)",
            cand_storage=cand_inputs,
        )
        run_trial(ctx, task, ref, cand, trial_seed(req, 0, 502), "recheck after timing (fresh storage)")
    rec.ok("recheck_after_timing", "2 calls: refilled timing storage and fresh storage")
    with phase("speed_of_light"), shared(ctx.device):
        speed_of_light(req, rec, ctx, ref, inputs, t.median_us("cand"))  # GPU time: the floor is physical
