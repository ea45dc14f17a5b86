"""Timing protocol: the same for the reference, its torch.compile'd form and the candidate, in one process.

GPU (pitfalls 4, 10, 13, 18): warm-up calls; then for every run: flush L2 by writing a buffer of 2× the L2
size, `torch.cuda.synchronize()`, record the start event, call, device-wide `torch.cuda.synchronize()` (so
work left on any stream is inside the window), record the end event. The host wall time of the same window is
recorded too: with the synchronisation inside the window the event time can only be ≈ the wall time, so an
event time far below it means forged or redirected timers. Callables are interleaved run by run, with the
order rotated every run, so clock and thermal drift hit all of them alike.

CPU: the same loop with `time.perf_counter` (no L2 flush); such numbers are flagged `timing_on_cpu` and are
never GPU claims.

The timer functions are captured at import, before any candidate code runs (and their identity is verified
after the candidate ran: `guards.snapshot_identities`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

__all__ = ["Timings", "time_interleaved", "l2_flush_bytes", "summarise"]

# Captured when the worker imports this module, before any candidate code runs.
_perf_counter = time.perf_counter
_CudaEvent = torch.cuda.Event
_cuda_sync = torch.cuda.synchronize
_DEFAULT_L2_BYTES = 64 << 20
# Event time below this fraction of the host wall time of the same window (and by more than the slack) is
# impossible with a device-wide sync inside the window.
WALL_RATIO_FLOOR = 0.5
WALL_SLACK_US = 200.0


@dataclass
class Timings:
    """Per-callable samples (µs) and host wall times (µs) of the same windows."""

    samples_us: dict[str, list[float]] = field(default_factory=dict)
    wall_us: dict[str, list[float]] = field(default_factory=dict)
    on_cpu: bool = False

    def median_us(self, name: str) -> float:
        return statistics.median(self.samples_us[name])

    def iqr_us(self, name: str) -> float:
        values = self.samples_us[name]
        if len(values) < 4:
            return max(values) - min(values)
        q = statistics.quantiles(values, n=4)
        return q[2] - q[0]

    def wall_problem(self, name: str) -> str | None:
        """Why the event times of `name` disagree with its host wall times (device_sync check), or None."""
        if self.on_cpu:
            return None
        event = statistics.median(self.samples_us[name])
        wall = statistics.median(self.wall_us[name])
        if event < WALL_RATIO_FLOOR * wall and wall - event > WALL_SLACK_US:
            return f"event time {event:.1f} µs ≪ host wall time {wall:.1f} µs of the same window"
        return None


def l2_flush_bytes(device: torch.device) -> int:
    """2× the device's L2 size (64 MiB assumed when the property is missing)."""
    props = torch.cuda.get_device_properties(device)
    l2 = int(getattr(props, "L2_cache_size", 0) or _DEFAULT_L2_BYTES)
    return 2 * l2


class _CudaTimer:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.flush_buf = torch.empty(l2_flush_bytes(device) // 4, dtype=torch.float32, device=device)
        self.event_cls = _CudaEvent
        self.sync = _cuda_sync

    def __call__(self, fn: Callable[[], object]) -> tuple[float, float]:
        self.flush_buf.fill_(1.0)  # evicts inputs and outputs of the previous call from L2
        self.sync()
        start, end = self.event_cls(enable_timing=True), self.event_cls(enable_timing=True)
        h0 = _perf_counter()
        start.record()
        fn()
        self.sync()  # device-wide: work on side streams is inside the window
        end.record()
        end.synchronize()
        h1 = _perf_counter()
        return start.elapsed_time(end) * 1e3, (h1 - h0) * 1e6


def _cpu_timer(fn: Callable[[], object]) -> tuple[float, float]:
    h0 = _perf_counter()
    fn()
    dt = (_perf_counter() - h0) * 1e6
    return dt, dt


def time_interleaved(
    fns: Mapping[str, Callable[[], object]], device: torch.device, runs: int, warmup: int
) -> Timings:
    """Time each callable `runs` times after `warmup` calls each, interleaved and order-rotated per run."""
    on_cpu = device.type != "cuda"
    timer: Callable[[Callable[[], object]], tuple[float, float]] = (
        _cpu_timer if on_cpu else _CudaTimer(device)
    )
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    if not on_cpu:
        torch.cuda.synchronize()
    result = Timings(samples_us={n: [] for n in names}, wall_us={n: [] for n in names}, on_cpu=on_cpu)
    for r in range(runs):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            event_us, wall_us = timer(fns[name])
            result.samples_us[name].append(event_us)
            result.wall_us[name].append(wall_us)
    return result


def summarise(values: list[float]) -> tuple[float, float]:
    """(median, interquartile range) of samples."""
    if len(values) < 4:
        return statistics.median(values), max(values) - min(values)
    q = statistics.quantiles(values, n=4)
    return statistics.median(values), q[2] - q[0]
