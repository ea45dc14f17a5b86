"""The two measurements beside the candidate's own timing: torch.compile of the reference (a baseline) and the
speed-of-light verdict on the candidate's median (see sol.py for why two floors)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from htam_graph.kernels_runtime import diskcache
from htam_graph.kernels_runtime.recorder import Recorder
from htam_graph.kernels_runtime.worker import checks, sol, timing_protocol
from htam_graph.kernels_runtime.worker.execution import CandidateFailure
from htam_graph.kernels_runtime.worker.trials import TrialContext, call_reference
from htam_graph.model import ErrorKind, EvalRequest

__all__ = ["compiled_reference", "speed_of_light"]


def compiled_reference(
    req: EvalRequest, rec: Recorder, ctx: TrialContext, ref: Any, inputs: list[Any]
) -> Any:
    """A timed callable of `torch.compile(reference)` (compiled now, outside the timed loop), or None when not
    measured (CPU, measure_baselines=False) or when compilation failed (recorded, never fatal)."""
    if not req.measure_baselines:
        rec.skip("baseline_compile", "request.measure_baselines=False")
        return None
    if ctx.device.type != "cuda":
        rec.skip("baseline_compile", "torch.compile is not measured on the CPU")
        return None
    try:
        compiled: Callable[..., Any] = torch.compile(ref)
        with torch.no_grad():
            compiled(*inputs)  # compiles now, outside the timed loop
        torch.cuda.synchronize()
    except Exception as e:  # a compile failure is recorded, never fatal
        rec.skip("baseline_compile", f"torch.compile failed: {type(e).__name__}: {str(e)[:200]}")
        return None
    rec.ok("baseline_compile", "torch.compile(reference), default mode")

    def run() -> None:
        with torch.no_grad():
            compiled(*inputs)

    return run


# Where the worker caches the reference's work (set by worker.main from the evaluator's cache dir; "" = off).
SOL_CACHE_DIR = ""


def _reference_work(req: EvalRequest, ctx: TrialContext, ref: Any, inputs: list[Any]) -> tuple[float, int]:
    """(matmul/conv FLOPs, output bytes) of one call of the REFERENCE on these inputs, cached on disk.

    Both are facts of the trusted reference's source and its inputs' shapes and dtypes (KernelBench references have
    no data-dependent output sizes), so they are cached per (torch version, shape variant, input signature, task
    source): counting FLOPs runs the reference under FlopCounterMode and once more for its output, ~1 s under
    the GPU's shared lock per evaluation otherwise. The candidate's runtime is never cached.
    """

    def compute() -> tuple[float, int]:
        flops = sol.count_flops(ref, checks.clone_inputs(inputs))
        out_bytes = checks.nbytes(call_reference(ref, checks.clone_inputs(inputs), 0, ctx))
        return float(flops), int(out_bytes)

    key = f"sol|{torch.__version__}|{req.shape}|{_signature(inputs)}|{req.task_source}"
    return diskcache.cached_json(SOL_CACHE_DIR, key, compute, _decode_work)


def _signature(inputs: list[Any]) -> str:
    """Shapes and dtypes of the tensor inputs, the values of the others."""
    return repr([(tuple(x.shape), str(x.dtype)) if isinstance(x, torch.Tensor) else x for x in inputs])


def _decode_work(cached: Any) -> tuple[float, int] | None:
    ok = isinstance(cached, list) and len(cached) == 2 and all(isinstance(v, int | float) for v in cached)
    return (float(cached[0]), int(cached[1])) if ok and cached[0] >= 0 and cached[1] >= 0 else None


def speed_of_light(
    req: EvalRequest, rec: Recorder, ctx: TrialContext, ref: Any, inputs: list[Any], median_us: float
) -> None:
    """Record the floors; below the byte floor is hack_detected, below the FLOP floor only flagged (sol.py)."""
    if ctx.device.type != "cuda":
        rec.skip("speed_of_light", "CPU timing: no GPU floor")
        return
    gpu = torch.cuda.get_device_name(ctx.device)
    peaks = sol.peaks_for(gpu)
    if peaks is None:
        rate = sol.measure_copy_rate(ctx.device)
        peaks = sol.GpuPeaks(rate, 0.0, 0.0, 0.0, f"{gpu}: measured copy rate only")
    flops, out_bytes = _reference_work(req, ctx, ref, inputs)
    l2 = timing_protocol.l2_flush_bytes(ctx.device) // 2
    floor = sol.floor_for(checks.nbytes(list(inputs)), out_bytes, flops, peaks, req.precision_policy, l2)
    verdict = sol.judge(median_us, floor)
    rec.set(sol_us=floor.sol_us, sol_flagged=verdict.flagged)
    if verdict.hack:
        raise CandidateFailure(ErrorKind.HACK_DETECTED, "speed_of_light", verdict.note)
    if verdict.flagged:
        rec.fail_check("speed_of_light", f"flagged for review (candidate kept correct): {verdict.note}")
    else:
        rec.ok("speed_of_light", f"{verdict.note} ({peaks.source})")
