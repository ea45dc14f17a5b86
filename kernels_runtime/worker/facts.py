"""`GpuFacts` for a run's prompts, measured inside a worker (mode "facts", see worker/__main__.py).

What a model needs to write for this device: the GPU (name, arch, SMs, L2, memory, the copy rate the speed-of-light
floor uses), the software (torch, Triton, CUDA; Triton interpreted on the CPU), the precision switches, the inputs
at the evaluated shape, and, on a GPU, the eager reference's time, its floor and where its time goes (torch.profiler,
the kernels of one forward call), plus the kernels of the current best candidate when there is one.

The reference's facts are computed once per (task source, shape, GPU, torch version, precision policy) and cached
on disk (`diskcache`, directory `FACTS_CACHE_DIR`); the best candidate's profile is measured each time it is asked
for (candidate results are never cached). Nothing here raises for a problem it can name: a fact that could not be
measured is left out and the reason goes into `notes`.
"""

from __future__ import annotations

import hashlib
import os
import types
from typing import Any

import torch

from htam_graph.devicefacts import GpuFacts, InputSpec, KernelTime
from htam_graph.kernels_runtime import diskcache, gpulock
from htam_graph.kernels_runtime.worker import checks, guards, harness, sharing, sol, timing_protocol
from htam_graph.kernels_runtime.worker.execution import build_models, load_candidate, make_inputs
from htam_graph.model import EvalRequest

__all__ = ["collect", "FACTS_CACHE_DIR", "kernel_table"]

FACTS_CACHE_DIR = ""  # set by worker.main from the evaluator's cache dir ("" = off)
_PROFILED_CALLS = 5
_TIMED_RUNS = 20
_TOP_KERNELS = 8


def collect(req: EvalRequest, workdir: Any) -> GpuFacts:
    """The facts for `req`'s task at its shape on its device; the candidate's profile when it is a kernel."""
    device = torch.device(req.device)
    variants = harness.variants_for(req)
    task = harness.load_task_variant(req, variants[0])
    facts: dict[str, Any] = {
        "device": req.device,
        "torch_version": torch.__version__,
        "triton_version": _triton_version(),
        "cuda_version": torch.version.cuda or "",
        "triton_interpreted": os.environ.get("TRITON_INTERPRET") == "1",
        "shape_variant": harness.variant_label(req.shape, variants[0]),
        "notes": [],
    }
    if device.type != "cuda":
        facts["inputs"] = [_spec(x).model_dump() for x in make_inputs(task, 0, device)]
        facts["gpu_arch"] = "cpu"
        return GpuFacts.model_validate(facts)
    guards.pin_precision(req.precision_policy)
    facts.update(_device(device))
    state = guards.precision_state()  # the reference's switches, as every evaluation pins them
    facts["tf32_off"] = not state["cuda.matmul.allow_tf32"] and not state["cudnn.allow_tf32"]
    key = f"facts|{torch.__version__}|{facts['gpu_name']}|{req.shape}|{req.precision_policy.value}|{req.task_source}"
    need = sharing.memory_need_bytes(task)
    # As an evaluation does (gpulock): device memory only inside the budget, device work under the shared lock,
    # timing and profiling under the exclusive one, which is never taken while the shared one is held.
    with gpulock.memory_budget(device.index or 0, need):
        with sharing.shared(device):
            inputs = make_inputs(task, 0, device)
        facts["inputs"] = [_spec(x).model_dump() for x in inputs]
        facts.update(
            diskcache.cached_json(
                FACTS_CACHE_DIR, key, lambda: _reference_facts(req, task, inputs, device, facts), _decode
            )
        )
        if req.candidate_kind == "kernel":
            facts.update(_best_facts(req, task, inputs, device, workdir, facts["notes"]))
    return GpuFacts.model_validate(facts)


def _triton_version() -> str:
    try:
        import triton

        return str(triton.__version__)
    except Exception:  # triton missing or broken: say nothing rather than fail the facts
        return ""


def _spec(x: Any) -> InputSpec:
    if isinstance(x, torch.Tensor):
        return InputSpec(shape=list(x.shape), dtype=str(x.dtype).removeprefix("torch."))
    return InputSpec(value=repr(x)[:80])


def _device(device: torch.device) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(device)
    name = torch.cuda.get_device_name(device)
    major, minor = torch.cuda.get_device_capability(device)
    peaks = sol.peaks_for(name)
    out: dict[str, Any] = {
        "gpu_name": name,
        "gpu_arch": f"sm_{major}{minor}",
        "sm_count": int(props.multi_processor_count),
        "memory_bytes": int(props.total_memory),
        "l2_bytes": int(getattr(props, "L2_cache_size", 0)) or None,
    }
    if peaks is not None:
        out["bandwidth_gbs"] = peaks.copy_bytes_per_s / 1e9
        out["bandwidth_source"] = peaks.source
    return out


def _reference_facts(
    req: EvalRequest, task: types.ModuleType, inputs: list[Any], device: torch.device, facts: dict[str, Any]
) -> dict[str, Any]:
    """The eager reference's time, floor and kernels at this shape on this GPU (cached by the caller)."""
    out: dict[str, Any] = {}
    with sharing.shared(device):
        torch.manual_seed(0)
        with torch.device(device):
            ref = task.Model(*task.get_init_inputs()).to(device)
        ref_inputs = checks.clone_inputs(inputs)
        peaks = sol.peaks_for(str(facts["gpu_name"]))
        if peaks is not None:
            with torch.no_grad():
                flops = sol.count_flops(ref, checks.clone_inputs(inputs))
                out_bytes = checks.nbytes(ref(*checks.clone_inputs(inputs)))
            l2 = timing_protocol.l2_flush_bytes(device) // 2
            floor = sol.floor_for(
                checks.nbytes(list(inputs)), out_bytes, flops, peaks, req.precision_policy, l2
            )
            out.update(
                sol_us=floor.sol_us, bytes_floor_us=floor.bytes_floor_us, flop_floor_us=floor.flop_floor_us
            )

    def run() -> None:
        with torch.no_grad():
            ref(*ref_inputs)

    with sharing.exclusive(device):
        t = timing_protocol.time_interleaved({"ref": run}, device, _TIMED_RUNS, 3)
        out["ref_eager_us"] = t.time_us("ref")
        kernels, total = kernel_table(run, _PROFILED_CALLS)
    out["eager_kernels"] = [k.model_dump() for k in kernels]
    out["eager_kernel_us"] = total
    return out


def _decode(cached: Any) -> dict[str, Any] | None:
    wanted = {"ref_eager_us", "eager_kernels", "eager_kernel_us"}
    return cached if isinstance(cached, dict) and wanted <= set(cached) else None


def _best_facts(
    req: EvalRequest,
    task: types.ModuleType,
    inputs: list[Any],
    device: torch.device,
    workdir: Any,
    notes: list[str],
) -> dict[str, Any]:
    """The best candidate's kernels in one forward call (its source was evaluated correct by the loop)."""
    try:
        candidate, cand_file = load_candidate(req.candidate_source, workdir, harness.main_overrides(req))
        with sharing.shared(device):
            _, cand, _ = build_models(task, candidate, 0, device, cand_file)
            cand_inputs = checks.clone_inputs(inputs)

            def run() -> None:
                with torch.no_grad():
                    cand(*cand_inputs)

            for _ in range(3):  # compile and autotune outside the profile
                run()
            torch.cuda.synchronize(device)
        with sharing.exclusive(device):
            kernels, _ = kernel_table(run, _PROFILED_CALLS)
    except Exception as e:  # a profile that fails leaves the prompt without it, never the run
        notes.append(f"the best candidate could not be profiled: {type(e).__name__}: {str(e)[:200]}")
        return {}
    digest = hashlib.sha256(req.candidate_source.encode()).hexdigest()
    return {"best_sha256": digest, "best_kernels": [k.model_dump() for k in kernels]}


def kernel_table(run: Any, calls: int) -> tuple[list[KernelTime], float]:
    """The GPU kernels of `calls` calls of `run` (torch.profiler), per call, most expensive first (at most
    `_TOP_KERNELS`), and their summed time per call (µs)."""
    from torch._C._autograd import DeviceType

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
    rows: list[tuple[str, float, int]] = []
    for evt in prof.key_averages():
        if getattr(evt, "device_type", None) != DeviceType.CUDA:
            continue
        us = float(getattr(evt, "self_device_time_total", 0.0) or getattr(evt, "self_cuda_time_total", 0.0))
        rows.append((str(evt.key), us / calls, max(1, round(int(evt.count) / calls))))
    total = sum(us for _, us, _ in rows)
    rows.sort(key=lambda r: (-r[1], r[0]))
    table = [
        KernelTime(name=name[:160], time_us=us, calls=n, share=us / total if total > 0 else 0.0)
        for name, us, n in rows[:_TOP_KERNELS]
    ]
    return table, total
