"""The device parts of a prompt, from `GpuFacts`.

- `device_section` (system part, stable for a run): where the kernel runs. On the CPU it says plainly that
  Triton runs in its interpreter, that this checks correctness only and that `@triton.autotune` runs its first
  config; on a GPU it names the GPU, its SMs, memory, L2 and copy rate, the torch / Triton / CUDA versions,
  the TF32 switches, the inputs at the evaluated shape, the eager reference's time, its speed-of-light floor
  and the kernels the reference spends its time in.
- `best_section` (step part): the current best kernel's own profile and, where Nsight Compute ran, an `ncu`
  summary of its most expensive kernel; only when the facts describe the very source the step starts from.
"""

from __future__ import annotations

import hashlib

from htam_graph.devicefacts import GpuFacts, InputSpec, KernelTime, NcuSummary
from htam_graph.model import GenerationRequest, Language

__all__ = ["best_section", "device_section", "inputs_text", "kernels_text", "ncu_text"]

_GIB = 1024**3
_MIB = 1024**2


def device_section(request: GenerationRequest) -> str:
    """Where the candidate runs and what the reference costs there (system part)."""
    facts = request.gpu_facts
    if request.device == "cpu":
        return _cpu_section(request, facts)
    if facts is None or facts.device != "cuda":
        return "The kernel runs on a CUDA GPU (its details could not be measured for this run)."
    lines = [_gpu_line(facts), _software_line(facts)]
    if facts.inputs:
        lines.append(inputs_text(facts))
    lines += _reference_lines(facts)
    return "\n".join(line for line in lines if line)


def _cpu_section(request: GenerationRequest, facts: GpuFacts | None) -> str:
    lines = [
        "The kernel runs on the CPU, where Triton runs in its interpreter (TRITON_INTERPRET=1): every "
        "program instance is executed as NumPy code. This run checks correctness only: timings here mean "
        "nothing, so no speed-up is reported and none is claimed. `@triton.autotune` runs only its first "
        "config (nothing is benchmarked).",
    ]
    if request.language is Language.CUDA:
        lines.append(
            "CUDA C++ extensions cannot be built or run here: such a candidate fails on this device."
        )
    if facts is not None:
        lines.append(_software_line(facts))
        if facts.inputs:
            lines.append(inputs_text(facts))
    return "\n".join(line for line in lines if line)


def _gpu_line(f: GpuFacts) -> str:
    parts = [f"{f.sm_count} SMs" if f.sm_count else ""]
    if f.memory_bytes:
        parts.append(f"{f.memory_bytes / _GIB:.0f} GiB memory")
    if f.l2_bytes:
        parts.append(f"{f.l2_bytes / _MIB:.0f} MiB L2")
    if f.bandwidth_gbs:
        parts.append(f"copy rate {f.bandwidth_gbs:,.0f} GB/s read + write ({f.bandwidth_source})")
    details = ", ".join(p for p in parts if p)
    return f"The kernel runs on an {f.gpu_name or 'NVIDIA GPU'} ({f.gpu_arch})" + (
        f": {details}." if details else "."
    )


def _software_line(f: GpuFacts) -> str:
    versions = [
        f"torch {f.torch_version}" if f.torch_version else "",
        f"Triton {f.triton_version}" if f.triton_version else "",
    ]
    if f.device == "cuda" and f.cuda_version:
        versions.append(f"CUDA {f.cuda_version}")
    text = ", ".join(v for v in versions if v)
    text = f"Software: {text}." if text else ""
    if f.device == "cuda" and f.tf32_off:
        text += (
            " TF32 is pinned off for the reference"
            " (torch.backends.cuda.matmul.allow_tf32 = cudnn.allow_tf32 = False)."
        )
    return text.strip()


def inputs_text(f: GpuFacts) -> str:
    """The inputs of `forward` at the evaluated shape, in order."""
    shown = "; ".join(f"input {i}: {_input(x)}" for i, x in enumerate(f.inputs))
    return f"Inputs at the evaluated shape ({f.shape_variant or 'default'}): {shown}."


def _input(x: InputSpec) -> str:
    if x.shape is None:
        return x.value or "?"
    return f"{x.dtype}[{', '.join(str(d) for d in x.shape)}]"


def _reference_lines(f: GpuFacts) -> list[str]:
    lines: list[str] = []
    if f.ref_eager_us:
        line = f"The eager reference takes {f.ref_eager_us:.1f} µs per call on this GPU"
        if f.sol_us:
            floors = [f"memory traffic {f.bytes_floor_us:.1f} µs" if f.bytes_floor_us else ""]
            if f.flop_floor_us:
                floors.append(f"FLOPs at peak {f.flop_floor_us:.1f} µs")
            why = ", ".join(p for p in floors if p)
            line += (
                f"; the task's speed-of-light floor is {f.sol_us:.1f} µs ({why}), so the reference reaches "
                f"{f.sol_us / f.ref_eager_us:.0%} of it"
            )
        lines.append(line + ".")
    if f.eager_kernels:
        total = f": {f.eager_kernel_us:.1f} µs of kernels" if f.eager_kernel_us else ""
        lines.append(f"Where the reference's time goes (torch.profiler, one forward call{total}):")
        lines.append(kernels_text(f.eager_kernels))
    return lines


def kernels_text(kernels: list[KernelTime]) -> str:
    """One line per kernel: share, time per call, name, launches per call."""
    return "\n".join(
        f"- {k.share:.0%} {k.time_us:.1f} µs `{k.name}`" + (f" ({k.calls} launches)" if k.calls > 1 else "")
        for k in kernels
    )


def ncu_text(n: NcuSummary) -> str:
    """One line of Nsight Compute numbers for one kernel launch."""
    parts = [f"{n.duration_us:.1f} µs" if n.duration_us is not None else ""]
    for value, label in (
        (n.sm_throughput_pct, "compute (SM) throughput"),
        (n.memory_throughput_pct, "memory throughput"),
        (n.dram_throughput_pct, "DRAM throughput"),
        (n.achieved_occupancy_pct, "achieved occupancy"),
        (n.l2_hit_rate_pct, "L2 hit rate"),
    ):
        if value is not None:
            parts.append(f"{label} {value:.0f}%" + (" of peak" if "throughput" in label else ""))
    if n.registers_per_thread is not None:
        parts.append(f"{n.registers_per_thread} registers/thread")
    if n.grid_size is not None and n.block_size is not None:
        parts.append(f"grid {n.grid_size} x block {n.block_size} threads")
    return f"Nsight Compute, one launch of `{n.kernel}`: " + "; ".join(p for p in parts if p) + "."


def best_section(request: GenerationRequest) -> str:
    """The current best kernel's profile on this GPU (step part), or "" when the facts do not describe it."""
    f = request.gpu_facts
    if f is None or f.device != "cuda" or not f.best_kernels:
        return ""
    if f.best_sha256 != hashlib.sha256(request.base_source.encode()).hexdigest():
        return ""
    lines = ["## Where the current best's time goes (this GPU)", "", "torch.profiler, one forward call:"]
    lines.append(kernels_text(f.best_kernels))
    if f.ncu is not None:
        lines.append(ncu_text(f.ncu))
    return "\n".join(lines)
