"""Speed-of-light floors per task (evaluation.md pitfall 14).

Two floors for the evaluated shape:
- bytes: every input read once from HBM, plus the output written once when it is larger than L2 (a smaller
  output can stay in the write-back L2 when the kernel ends), at the GPU's measured copy rate;
- FLOPs: matmul/conv FLOPs the reference performs (`FlopCounterMode`), at the compute peak of the policy.

Verdicts (`judge`):
- faster than 0.9 × the byte floor: physically impossible (the inputs cannot all have been read), so the
  timing is not real: hack_detected, correct=False. The 0.9 margin absorbs the gap between the measured copy
  rate and the datasheet bandwidth.
- faster than 0.9 × the FLOP floor but not the byte floor: `sol_flagged=True`, recorded in the check, but the
  candidate stays correct. The reference's FLOP count is not a lower bound: KernelBench tasks such as
  Gemm→Sum admit algebraic rewrites (x @ W.sum(0)) and triangular/diagonal structure that remove most FLOPs, and
  Winograd/FFT convolutions do fewer multiplies (conv FLOPs are discounted 4× for that reason). Calling those
  wins hacks would teach the memory that algebraic simplification is cheating.

Peaks are lower-bound-safe: for fp32-strict the compute peak is max(FP32 FMA peak, TF32 peak / 3), since
3xTF32 emulation reaches fp32 accuracy on tensor cores and must not be flagged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from htam_graph.devicefacts import SOL_MARGIN
from htam_graph.model import PrecisionPolicy

__all__ = [
    "GpuPeaks",
    "GPU_TABLE",
    "peaks_for",
    "SolFloor",
    "floor_for",
    "judge",
    "count_flops",
    "SOL_MARGIN",
]

CONV_FLOP_DISCOUNT = 4.0


@dataclass(frozen=True)
class GpuPeaks:
    """Throughput of one GPU model: copy rate (bytes read + written per second) and dense compute peaks."""

    copy_bytes_per_s: float
    fp32_flops: float
    tf32_flops: float
    bf16_flops: float
    source: str

    def compute_peak(self, policy: PrecisionPolicy) -> float:
        if policy is PrecisionPolicy.BF16:
            return self.bf16_flops
        if policy is PrecisionPolicy.TF32:
            return self.tf32_flops
        return max(self.fp32_flops, self.tf32_flops / 3.0)


# Matched by substring of torch.cuda.get_device_name(). H100/A100 take the fastest form factor (SXM) so that
# the floor stays a lower bound on the PCIe parts too.
GPU_TABLE: dict[str, GpuPeaks] = {
    "H200": GpuPeaks(
        4.3e12, 67e12, 495e12, 989e12, "H200: measured D2D copy 4.3 TB/s; datasheet dense peaks"
    ),
    "H100": GpuPeaks(3.35e12, 67e12, 495e12, 989e12, "H100 SXM datasheet (3.35 TB/s HBM3)"),
    "A100": GpuPeaks(2.04e12, 19.5e12, 156e12, 312e12, "A100 80GB SXM datasheet (2.04 TB/s HBM2e)"),
}


def peaks_for(gpu_name: str) -> GpuPeaks | None:
    """The table row whose key occurs in `gpu_name`, else None."""
    for key, peaks in GPU_TABLE.items():
        if key in gpu_name:
            return peaks
    return None


def measure_copy_rate(device: torch.device, nbytes: int = 1 << 30, repeats: int = 5) -> float:
    """Best device-to-device copy rate (bytes read + written per second) over a few repeats (unknown GPUs)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return 2 * nbytes / best


@dataclass(frozen=True)
class SolFloor:
    """Floors (µs) of one task at one shape, with what they were computed from."""

    bytes_floor_us: float
    flop_floor_us: float | None
    input_bytes: int
    output_bytes: int
    flops: float | None

    @property
    def sol_us(self) -> float:
        return max(self.bytes_floor_us, self.flop_floor_us or 0.0)


def count_flops(fn: Any, inputs: Sequence[Any]) -> float:
    """Matmul/conv FLOPs of one call of `fn` (conv discounted by CONV_FLOP_DISCOUNT, see the module doc)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        fn(*inputs)
    total = 0.0
    for op, n in counter.get_flop_counts().get("Global", {}).items():
        total += n / CONV_FLOP_DISCOUNT if "conv" in str(op) else n
    return total


def floor_for(
    in_bytes: int,
    out_bytes: int,
    flops: float | None,
    peaks: GpuPeaks,
    policy: PrecisionPolicy,
    l2_bytes: int,
) -> SolFloor:
    """Both floors for one call that reads `in_bytes` and writes `out_bytes`."""
    moved = in_bytes + (out_bytes if out_bytes > l2_bytes else 0)
    bytes_floor_us = moved / peaks.copy_bytes_per_s * 1e6
    flop_floor_us = None if not flops or peaks.fp32_flops <= 0 else flops / peaks.compute_peak(policy) * 1e6
    return SolFloor(bytes_floor_us, flop_floor_us, in_bytes, out_bytes, flops)


@dataclass(frozen=True)
class SolVerdict:
    """`hack`: below the byte floor (not a real timing). `flagged`: below a floor (recorded)."""

    hack: bool
    flagged: bool
    note: str


def judge(runtime_us: float, floor: SolFloor) -> SolVerdict:
    """Compare a candidate's median runtime with the floors (see the module doc for why two verdicts)."""
    if runtime_us < SOL_MARGIN * floor.bytes_floor_us:
        return SolVerdict(
            True,
            True,
            f"{runtime_us:.2f} µs is below {SOL_MARGIN} × the byte floor {floor.bytes_floor_us:.2f} µs "
            f"({floor.input_bytes} input bytes must be read): not a real timing",
        )
    if floor.flop_floor_us is not None and runtime_us < SOL_MARGIN * floor.flop_floor_us:
        return SolVerdict(
            False,
            True,
            f"{runtime_us:.2f} µs is below {SOL_MARGIN} × the reference-FLOP floor {floor.flop_floor_us:.2f} µs: "
            "possible only through an algebraic rewrite; flagged for review",
        )
    return SolVerdict(False, False, f"floor {floor.sol_us:.2f} µs")
