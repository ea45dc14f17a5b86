"""Facts about the device a run evaluates on and about the task's reference there (`GpuFacts`).

The evaluator side measures them (`kernels_runtime/worker/facts.py`, in a worker;
`kernels_runtime/parent/ncu.py` beside it) and the loop passes them into every `GenerationRequest`, so a model
knows which GPU it writes for, what the reference costs there and where its time goes. Plain data: nothing
here measures anything.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SOL_MARGIN", "GpuFacts", "InputSpec", "KernelTime", "NcuSummary"]

# A candidate timed below this fraction of its speed-of-light floor (`GpuFacts.sol_us`) is rejected as a
# timing that cannot be real (kernels_runtime/worker/sol.py). The margin absorbs the gap between the measured
# copy rate the byte floor uses (reads and writes) and what a kernel that mostly reads can stream.
SOL_MARGIN = 0.9


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InputSpec(_Frozen):
    """One argument of `forward` at the evaluated shape: a tensor's shape and dtype, or another value's
    repr."""

    shape: list[int] | None = None  # None: not a tensor
    dtype: str = ""  # e.g. "float32"
    value: str = ""  # repr of a non-tensor argument


class KernelTime(_Frozen):
    """One GPU kernel of a profiled forward call (torch.profiler), summed over its launches in that call."""

    name: str
    time_us: float  # per forward call
    calls: int = 1  # launches per forward call
    share: float = 0.0  # of the summed kernel time of the call, 0..1


class NcuSummary(_Frozen):
    """Nsight Compute's view of one kernel launch (the best candidate's most expensive kernel)."""

    kernel: str
    duration_us: float | None = None
    sm_throughput_pct: float | None = None  # compute (SM) throughput, % of peak
    memory_throughput_pct: float | None = None  # the busiest memory unit, % of peak
    dram_throughput_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    l2_hit_rate_pct: float | None = None
    registers_per_thread: int | None = None
    grid_size: int | None = None
    block_size: int | None = None


class GpuFacts(_Frozen):
    """What the evaluator knows about the device and the task's reference on it (`device` "cpu": no GPU)."""

    device: Literal["cpu", "cuda"]
    gpu_name: str = ""
    gpu_arch: str = ""  # e.g. "sm_90"; "cpu" on the CPU
    sm_count: int | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    bandwidth_gbs: float | None = None  # the copy rate the speed-of-light floor uses (GB/s, read + write)
    bandwidth_source: str = ""
    torch_version: str = ""
    triton_version: str = ""
    cuda_version: str = ""
    triton_interpreted: bool = False  # TRITON_INTERPRET=1: kernels run as numpy on the CPU
    tf32_off: bool | None = None  # TF32 pinned off for matmul and cuDNN (fp32-strict); None: not applicable
    shape_variant: str = ""  # e.g. "default" or "smoke {N=64}"
    inputs: list[InputSpec] = Field(default_factory=list)
    ref_eager_us: float | None = None  # median of the eager reference, timed alone
    sol_us: float | None = None  # speed-of-light floor at this shape (kernels_runtime/worker/sol.py)
    bytes_floor_us: float | None = None
    flop_floor_us: float | None = None
    eager_kernels: list[KernelTime] = Field(
        default_factory=list
    )  # the reference's kernels, most expensive first
    eager_kernel_us: float | None = None  # their summed time per forward call
    best_sha256: str = ""  # the candidate `best_kernels` and `ncu` describe ("" : none profiled)
    best_kernels: list[KernelTime] = Field(default_factory=list)
    ncu: NcuSummary | None = None
    ncu_note: str = ""  # why there is no ncu summary (not installed, no permission, failed)
    notes: list[str] = Field(default_factory=list)  # what could not be measured, and why
