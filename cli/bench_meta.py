"""What bench.json records about a bench besides its spec: the command that reproduces it, the dtype and
tolerances, the timing method and the environment (GPU, torch, Triton, htam-graph versions)."""

from __future__ import annotations

import shlex
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from htam_graph import __version__
from htam_graph.bench.engine import FORMAT_VERSION, BenchSpec
from htam_graph.loop import RunConfig
from htam_graph.model import Device, EvalRequest, PrecisionPolicy

__all__ = ["bench_meta"]

_DTYPE = {
    PrecisionPolicy.FP32_STRICT: "fp32",
    PrecisionPolicy.TF32: "fp32 (tf32 allowed)",
    PrecisionPolicy.BF16: "bf16/fp16 allowed",
}


def bench_meta(spec: BenchSpec, out: Path) -> dict[str, Any]:
    """bench.json's fields at the start of a bench (`finished_ms` is set at its end)."""
    rtol, atol = _tolerances(spec.precision_policy)
    return {
        "format_version": FORMAT_VERSION,
        "command": _command(spec, out),
        **spec.config(),
        "dtype": _DTYPE[spec.precision_policy],
        "rtol": rtol,
        "atol": atol,
        "timing_method": _timing_method(spec.device),
        **_environment(spec.device),
        "started_ms": int(time.time() * 1000),
        "finished_ms": None,
    }


def _tolerances(policy: PrecisionPolicy) -> tuple[float, float]:
    from htam_graph.kernels_runtime.recorder import tolerances

    rtol, atol = tolerances(
        EvalRequest(task_key="", task_source="", candidate_source="", precision_policy=policy)
    )
    return float(rtol), float(atol)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def _timing_method(device: Device) -> str:
    config = RunConfig(device=device)  # the loop's choice when timing_runs is left unset
    runs, warmup = config.timed_runs, config.warmup_runs
    if device == "cuda":
        return (
            f"CUDA events, L2 flushed, median of {runs} runs after {warmup} warm-up, interleaved with the "
            "reference and torch.compile; each timed section alone on its GPU (no other worker's device work "
            "inside it but a torch.compile warm-up)"
        )
    return (
        f"CPU time.perf_counter (Triton interpreted), median of {runs} runs after {warmup} warm-up, "
        "interleaved with the reference; not a GPU measurement"
    )


def _torch_version() -> str:
    """torch.__version__, as the workers report it (with its local part, e.g. "+cu130"; the distribution's
    metadata drops it, so a report would list one torch under two spellings)."""
    try:
        import torch
    except ImportError:
        return ""
    return str(torch.__version__)


def _environment(device: Device) -> dict[str, Any]:
    info: dict[str, Any] = {
        "gpu_name": "cpu",
        "torch_version": _torch_version(),
        "triton_version": _version("triton"),
        "htam_graph_version": __version__,
    }
    if device == "cuda":
        import torch

        info["gpu_name"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    return info


def _command(spec: BenchSpec, out: Path) -> str:
    args = ["htam-graph", "bench", "--tasks", *spec.selectors, "--backend", spec.backend]
    for p in spec.policies:
        args += ["--policy", p]
    args += ["--steps", str(spec.steps), "--device", spec.device, "--shape", spec.shape]
    args += ["--seeds", ",".join(map(str, spec.seeds)), "--workers", str(spec.workers)]
    args += ["--executor", spec.executor, "--precision", spec.precision_policy.value]
    if spec.task_timeout_s is not None:
        args += ["--task-timeout", f"{spec.task_timeout_s:g}"]
    if spec.frozen_memory:
        args.append("--frozen-memory")
    if spec.budget_usd is not None:
        args += ["--budget-usd", f"{spec.budget_usd:g}"]
    args += spec.llm_flags.args()
    return shlex.join([*args, "--out", str(out)])
