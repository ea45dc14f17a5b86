"""Reference baselines (eager and torch.compile), measured with the candidates' protocol, as graph rows.

A baseline is the reference copied as `ModelNew` evaluated on the trusted reference track: the same worker, the
same interleaved CUDA-event timing with L2 flushes, the same GPU. Its own speedup (≈ 1.0) is recorded too: the
spread of that number across tasks is the harness's noise floor.
"""

from __future__ import annotations

import time
from typing import Any

from htam_graph.kernels_runtime.parent.reference import reference_as_candidate
from htam_graph.model import EvalRequest, EvalResult, PrecisionPolicy, ShapeVariant

__all__ = ["baseline_request", "baseline_key", "baseline_row"]


def baseline_request(
    task_key: str,
    task_source: str,
    device: str,
    shape: ShapeVariant = "default",
    timing_runs: int = 20,
    measure_compile: bool = True,
    timeout_s: float = 600.0,
    policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT,
) -> EvalRequest:
    """The request that measures a task's baselines (one correctness trial: the reference is the candidate)."""
    return EvalRequest(
        task_key=task_key,
        task_source=task_source,
        candidate_source=reference_as_candidate(task_source),
        device=device,  # type: ignore[arg-type]
        shape=shape,
        precision_policy=policy,
        trials=1,
        extra_shapes=0,
        timing_runs=timing_runs,
        warmup_runs=3,
        timeout_s=timeout_s,
        measure_baselines=measure_compile,
        candidate_kind="reference",
    )


def baseline_key(task_key: str, gpu_arch: str, shape: str, policy: str) -> str:
    """`task|gpu_arch|shape|policy`: one baseline per task, architecture, shape variant and precision track."""
    return f"{task_key}|{gpu_arch}|{shape}|{policy}"


def baseline_row(request: EvalRequest, result: EvalResult, now_ms: int | None = None) -> dict[str, Any]:
    """The `baseline_upsert` row of one measured result (raise ValueError when nothing was measured)."""
    if result.ref_eager_us is None:
        raise ValueError(
            f"no eager timing for {request.task_key}: {result.error_kind} {result.error_excerpt[:200]}"
        )
    policy = result.precision_policy.value
    props = {
        "task_key": request.task_key,
        "gpu_arch": result.gpu_arch,
        "gpu_name": result.gpu_name,
        "shape": result.shape_variant,
        "precision_policy": policy,
        "eager_us": result.ref_eager_us,
        "eager_spread_us": result.runtime_spread_us,
        "compile_us": result.ref_compile_us,
        "torch_version": result.torch_version,
        "timing_on_cpu": result.timing_on_cpu,
        "timing_method": result.timing_method,
        "timing_runs": request.timing_runs,
        "measured_ms": int(time.time() * 1000) if now_ms is None else now_ms,
    }
    key = baseline_key(request.task_key, result.gpu_arch, request.shape, policy)
    return {"key": key, "task_key": request.task_key, "props": props}
