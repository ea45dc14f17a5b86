"""Timing protocol: the same for the reference, its torch.compile'd form and the candidate, in one process.

GPU, the head-start protocol (pitfalls 4, 10, 13, 18; EVAL.md "Timing protocol"). Warm-up calls first, which
also measure how long each callable takes to launch on the host. Then, for every run:
- flush L2 by writing a buffer of 2× the L2 size;
- `torch.cuda.synchronize()`;
- a sleep kernel (`torch.cuda._sleep`) on the caller's stream, sized to 3× the callable's host launch time and at
  least 1 ms, so the GPU stays busy while the host queues the call;
- start event, call, end event, all on the caller's stream;
- device-wide `torch.cuda.synchronize()`.
The window holds the call's GPU time, not the host's wake-up from a synchronise or the launch path of a call whose
GPU work outlasts it. Those had made Inductor graphs and Python-launched Triton look up to 2.5× slower than
`triton.testing.do_bench`, and slower still on a loaded host. The host time to queue each call is recorded too:
a call costs `max(GPU time, host launch time)` (`Timings.time_us`), because in a stream of calls a launch-bound
call runs no faster than the host queues it. That is what do_bench's back-to-back loop sees. The launch time is the
host time of a burst of LAUNCH_BURST back-to-back calls divided by its length, the median of LAUNCH_BURSTS bursts
(a single call after a synchronise launches slower than calls in a stream: 14 µs against 5 µs for one ReLU).

Two defences cover what the head start opens:
- Work on a side stream that is not ordered after the sleep could run before the start event, and work on one the
  caller's stream never waits for could end after the end event. The candidate therefore gets one more call under
  the CUDA profiler (`audit_streams`), between a sleep marker as long as the head start and a short end marker on
  the caller's stream. Every kernel, copy and memset of that call must start after the first marker and end
  before the second (check `caller_stream`). Forked and joined streams pass: cuDNN runs its FFT and dgrad engines
  for transposed convolutions on its own streams that way (seen on the H200 for 4 of the 100 dev tasks).
- The device-wide synchronise after the end event is inside the host wall time of the run. The head start is
  measured with its own event pair and subtracted from that wall time. An event time far below the remaining wall
  time means work outlived the window (long side-stream work) or the timers were forged (check `device_sync`).
When the profiler records no GPU activity (no CUPTI), the audit cannot vouch for the window. The evaluation is
then timed again with the older sync-in-window protocol: a device-wide synchronise before the end event, no head
start. That protocol is also used where the window must include host work.

CPU: the same loop with `time.perf_counter` (no L2 flush); such numbers are flagged `timing_on_cpu` and are
never GPU claims.

The timer functions are captured at import, before any candidate code runs (and their identity is verified
after the candidate ran: `guards.snapshot_identities`).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.profiler

__all__ = [
    "HEAD_START",
    "SYNC_IN_WINDOW",
    "CPU_PERF_COUNTER",
    "StreamAudit",
    "Timings",
    "audit_streams",
    "l2_flush_bytes",
    "streams_of_trace",
    "summarise",
    "time_interleaved",
]

Protocol = Literal["head_start", "sync_in_window"]
HEAD_START: Protocol = "head_start"
SYNC_IN_WINDOW: Protocol = "sync_in_window"
CPU_PERF_COUNTER = "cpu_perf_counter"

# Captured when the worker imports this module, before any candidate code runs.
_perf_counter = time.perf_counter
_CudaEvent = torch.cuda.Event
_cuda_sync = torch.cuda.synchronize
_cuda_sleep: Callable[[int], None] = torch.cuda._sleep
_profile: Callable[..., torch.profiler.profile] = torch.profiler.profile
_CUDA_ACTIVITY = torch.profiler.ProfilerActivity.CUDA
_CPU_ACTIVITY = torch.profiler.ProfilerActivity.CPU
_DEFAULT_L2_BYTES = 64 << 20
# Event time below this fraction of the host wall time of the same window (and by more than the slack) is
# impossible when everything the call queued ran inside the window.
WALL_RATIO_FLOOR = 0.5
WALL_SLACK_US = 200.0
# The head start: HEAD_START_FACTOR × the host launch time measured in warm-up, within [MIN, MAX] µs.
HEAD_START_MIN_US = 1000.0
HEAD_START_MAX_US = 100_000.0
HEAD_START_FACTOR = 3.0
LAUNCH_BURST = 5
LAUNCH_BURSTS = 3
# The sleep kernel's name in ATen (aten/src/ATen/cuda/Sleep.cu): the audit's marker of the caller's stream.
_SLEEP_KERNEL = "spin_kernel"
_GPU_ACTIVITY = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
AUDIT_SLACK_US = (
    1.0  # timestamp rounding; work on an unordered stream misses the window by the head start (≥ 1 ms)
)


@dataclass
class Timings:
    """Per-callable samples (µs), host wall times (µs) of the same windows, and how they were taken."""

    samples_us: dict[str, list[float]] = field(default_factory=dict)
    wall_us: dict[str, list[float]] = field(default_factory=dict)
    on_cpu: bool = False
    protocol: str = HEAD_START
    head_start_us: dict[str, float] = field(default_factory=dict)  # median measured head start per callable
    # Runs whose host launch outlasted the head start: the GPU waited on the host inside the window, so the
    # sample is too slow, never too fast.
    starved_runs: dict[str, int] = field(default_factory=dict)
    # Host µs per call in bursts of back-to-back calls (head start only): the floor of a call's time in a stream.
    launch_us: dict[str, list[float]] = field(default_factory=dict)
    cycles_per_us: float = 0.0  # the sleep kernel's clock (head start only)
    # Callables re-timed with the synchronise inside the window: the host blocked on the device inside the call.
    sync_in_window: set[str] = field(default_factory=set)

    def median_us(self, name: str) -> float:
        """The median event time: the call's GPU time."""
        return statistics.median(self.samples_us[name])

    def host_launch_us(self, name: str) -> float:
        """The median host time to queue one call (0.0 when not measured)."""
        values = self.launch_us.get(name) or [0.0]
        return statistics.median(values)

    def time_us(self, name: str) -> float:
        """The time a call costs in a stream of calls: its GPU time, or its host launch time when that is longer
        (a launch-bound call cannot run faster than the host queues it; the head start hides that from events).
        A callable re-timed sync-in-window already has its host work inside the window."""
        if name in self.sync_in_window:
            return self.median_us(name)
        return max(self.median_us(name), self.host_launch_us(name))

    def host_bound(self, name: str) -> bool:
        return name not in self.sync_in_window and self.host_launch_us(name) > self.median_us(name)

    def iqr_us(self, name: str) -> float:
        return summarise(self.samples_us[name])[1]

    def wall_problem(self, name: str) -> str | None:
        """Why the event times of `name` disagree with its host wall times (device_sync check), or None."""
        if self.on_cpu:
            return None
        event = statistics.median(self.samples_us[name])
        wall = statistics.median(self.wall_us[name])
        if event < WALL_RATIO_FLOOR * wall and wall - event > WALL_SLACK_US:
            return (
                f"event time {event:.1f} µs ≪ host wall time {wall:.1f} µs of the same window: work outlived "
                "the timed window or the timers were forged"
            )
        return None

    def describe(self, name: str) -> str:
        """One line on how `name` was timed, for the result's check notes."""
        if self.on_cpu:
            return "CPU: perf_counter"
        if self.protocol == SYNC_IN_WINDOW:
            return "sync-in-window: device-wide synchronize before the end event"
        starved = self.starved_runs.get(name, 0)
        if name in self.sync_in_window:
            return (
                f"host blocked on the device inside the call (the head start of "
                f"{self.head_start_us.get(name, 0.0) / 1e3:.1f} ms ran out in {starved}/{len(self.samples_us[name])} "
                "runs): timed again sync-in-window, device-wide synchronize before the end event"
            )
        note = f", host launch outlasted it in {starved}/{len(self.samples_us[name])} runs" if starved else ""
        if self.host_bound(name):
            note += (
                f"; host-bound: launch {self.host_launch_us(name):.1f} µs > GPU {self.median_us(name):.1f} µs, "
                "the launch time counts"
            )
        return (
            f"head start {self.head_start_us.get(name, 0.0) / 1e3:.1f} ms{note}; device-wide synchronize "
            "after the end event; event vs host wall time agree"
        )


def l2_flush_bytes(device: torch.device) -> int:
    """2× the device's L2 size (64 MiB assumed when the property is missing)."""
    props = torch.cuda.get_device_properties(device)
    l2 = int(getattr(props, "L2_cache_size", 0) or _DEFAULT_L2_BYTES)
    return 2 * l2


def head_start_us(launch_us: list[float]) -> float:
    """The head start for a callable whose warm-up calls took `launch_us` on the host (no synchronise)."""
    if not launch_us:
        return HEAD_START_MIN_US
    return min(HEAD_START_MAX_US, max(HEAD_START_MIN_US, HEAD_START_FACTOR * statistics.median(launch_us)))


class _CudaTimer:
    def __init__(self, device: torch.device, protocol: Protocol) -> None:
        self.device = device
        self.protocol = protocol
        self.flush_buf = torch.empty(l2_flush_bytes(device) // 4, dtype=torch.float32, device=device)
        self.cycles_per_us = 0.0

    def calibrate(self) -> None:
        """Clock cycles per µs of the sleep kernel (SM clock), from one event-timed sleep. Called after the
        warm-ups: an idle H200 runs at 345 MHz and clocks up to 1980 MHz under load, so a calibration on an idle
        GPU made every head start ~6× shorter than asked. Each timed run re-calibrates from its measured sleep."""
        _cuda_sleep(1000)
        cycles = 2_000_000
        start, end = _CudaEvent(enable_timing=True), _CudaEvent(enable_timing=True)
        _cuda_sync()
        start.record()
        _cuda_sleep(cycles)
        end.record()
        end.synchronize()
        self.cycles_per_us = cycles / max(start.elapsed_time(end) * 1e3, 1.0)

    def launch_us(self, fn: Callable[[], object], calls: int = 1) -> float:
        """Host µs per call to queue `calls` back-to-back calls, after the GPU drained (1: a warm-up call)."""
        _cuda_sync()
        h0 = _perf_counter()
        for _ in range(calls):
            fn()
        h1 = _perf_counter()
        _cuda_sync()
        return (h1 - h0) * 1e6 / calls

    def __call__(self, fn: Callable[[], object], head_start: float) -> tuple[float, float, float, bool]:
        """(event µs, host wall µs of the same window, the head start's µs, whether the host launch outlasted
        it)."""
        self.flush_buf.fill_(1.0)  # evicts inputs and outputs of the previous call from L2
        _cuda_sync()
        start, end = _CudaEvent(enable_timing=True), _CudaEvent(enable_timing=True)
        if self.protocol == SYNC_IN_WINDOW:
            h0 = _perf_counter()
            start.record()
            fn()
            _cuda_sync()  # device-wide: work on side streams is inside the window
            end.record()
            end.synchronize()
            h1 = _perf_counter()
            return start.elapsed_time(end) * 1e3, (h1 - h0) * 1e6, 0.0, False
        slept = _CudaEvent(enable_timing=True)
        h0 = _perf_counter()
        slept.record()
        cycles = max(1000, int(head_start * self.cycles_per_us))
        _cuda_sleep(cycles)
        start.record()
        fn()
        h_queued = _perf_counter()
        end.record()
        _cuda_sync()  # device-wide, after the window: work left on any stream lands in the host wall time
        h1 = _perf_counter()
        sleep_us = slept.elapsed_time(start) * 1e3
        if sleep_us > 0:
            self.cycles_per_us = cycles / sleep_us  # follows the SM clock
        starved = (h_queued - h0) * 1e6 > sleep_us
        return start.elapsed_time(end) * 1e3, (h1 - h0) * 1e6 - sleep_us, sleep_us, starved


def _cpu_timer(fn: Callable[[], object]) -> tuple[float, float]:
    h0 = _perf_counter()
    fn()
    dt = (_perf_counter() - h0) * 1e6
    return dt, dt


def _rotations(names: list[str], runs: int) -> Iterator[str]:
    """The callables of `runs` rounds, each round in order rotated by one, so clock and thermal drift hit all of
    them alike."""
    for r in range(runs):
        k = r % len(names)
        yield from names[k:] + names[:k]


def time_interleaved(
    fns: Mapping[str, Callable[[], object]],
    device: torch.device,
    runs: int,
    warmup: int,
    protocol: Protocol = HEAD_START,
) -> Timings:
    """Time each callable `runs` times after `warmup` calls each, interleaved and order-rotated per run."""
    names = list(fns)
    if device.type != "cuda":
        for name in names:
            for _ in range(warmup):
                fns[name]()
        cpu = Timings(samples_us={n: [] for n in names}, wall_us={n: [] for n in names}, on_cpu=True,
                      protocol=CPU_PERF_COUNTER)  # fmt: skip
        for name in _rotations(names, runs):
            event_us, wall_us = _cpu_timer(fns[name])
            cpu.samples_us[name].append(event_us)
            cpu.wall_us[name].append(wall_us)
        return cpu
    timer = _CudaTimer(device, protocol)
    head: dict[str, float] = {}
    bursts: dict[str, list[float]] = {}
    for name in names:
        launches = [timer.launch_us(fns[name]) for _ in range(warmup)]
        head[name] = head_start_us(launches[1:] or launches)  # the first call may compile or autotune
        if protocol == HEAD_START:
            bursts[name] = [timer.launch_us(fns[name], LAUNCH_BURST) for _ in range(LAUNCH_BURSTS)]
    _cuda_sync()
    if protocol == HEAD_START:
        timer.calibrate()
    result = Timings(samples_us={n: [] for n in names}, wall_us={n: [] for n in names}, protocol=protocol,
                     starved_runs={n: 0 for n in names}, launch_us=bursts)  # fmt: skip
    slept: dict[str, list[float]] = {n: [] for n in names}
    for name in _rotations(names, runs):
        event_us, wall_us, sleep_us, starved = timer(fns[name], head[name])
        slept[name].append(sleep_us)
        result.samples_us[name].append(event_us)
        result.wall_us[name].append(wall_us)
        result.starved_runs[name] += int(starved)
    if protocol == HEAD_START:  # the head starts as measured (their own event pair), the clock at the end
        result.head_start_us = {n: statistics.median(v) for n, v in slept.items()}
        result.cycles_per_us = timer.cycles_per_us
        # A call that waits on the device inside itself (a synchronous copy, .item(), a library's internal sync)
        # blocks the host until the head start has run out: the window then holds host gaps the head start cannot
        # hide, and its start is not where the call's work starts. Such callables are timed again with the device
        # synchronise inside the window, which is what a stream of such calls costs.
        blocked = [n for n in names if 2 * result.starved_runs[n] > runs]
        if blocked:
            timer.protocol = SYNC_IN_WINDOW
            for n in blocked:
                result.samples_us[n], result.wall_us[n] = [], []
            for name in _rotations(blocked, runs):
                event_us, wall_us, _, _ = timer(fns[name], 0.0)
                result.samples_us[name].append(event_us)
                result.wall_us[name].append(wall_us)
            result.sync_in_window = set(blocked)
    return result


@dataclass(frozen=True)
class StreamAudit:
    """Where one profiled call put its GPU work, against a window like the timed one. `caller` is None when the
    profiler saw no GPU activity (no CUPTI)."""

    caller: int | None
    activities: int  # kernels, copies and memsets of the call (the two markers excluded)
    other_streams: int = 0  # of those, how many ran on another stream (a library's forked and joined streams)
    escaped: list[str] = field(default_factory=list)  # "name (stream N) why" of work outside the window

    @property
    def observed(self) -> bool:
        return self.caller is not None

    def problem(self) -> str | None:
        if not self.escaped:
            return None
        shown = "; ".join(self.escaped[:3]) + (
            f" and {len(self.escaped) - 3} more" if len(self.escaped) > 3 else ""
        )
        return (
            f"{len(self.escaped)} of {self.activities} GPU activities ran outside the window of the caller's stream "
            f"{self.caller}: {shown} (side-stream work not ordered after the start or not joined before the end)"
        )

    def describe(self) -> str:
        others = (
            f", {self.other_streams} of them on other streams, forked and joined"
            if self.other_streams
            else ""
        )
        return f"{self.activities} GPU activities of one call, all inside the caller's window{others}"


def _span(e: Mapping[str, Any]) -> tuple[float, float]:
    ts = float(e.get("ts", 0.0))
    return ts, ts + float(e.get("dur", 0.0))


def streams_of_trace(trace: Mapping[str, Any]) -> StreamAudit:
    """Read a Kineto chrome trace of `audit_streams`: the first sleep kernel is the start marker (its stream is the
    caller's), the last sleep kernel on that stream the end marker. Every kernel, copy or memset of the call must
    start after the start marker ended and end before the end marker started (µs timestamps, AUDIT_SLACK_US)."""
    events = [e for e in trace.get("traceEvents", []) if e.get("cat") in _GPU_ACTIVITY and e.get("ph") == "X"]
    events.sort(key=lambda e: float(e.get("ts", 0.0)))
    sleeps = [e for e in events if e.get("cat") == "kernel" and _SLEEP_KERNEL in str(e.get("name", ""))]
    if len(sleeps) < 2:
        return StreamAudit(caller=None, activities=len(events))

    def stream(e: Mapping[str, Any]) -> int:
        return int(e.get("args", {}).get("stream", -1))

    first = sleeps[0]
    caller = stream(first)
    last = [e for e in sleeps if stream(e) == caller][-1]
    if last is first:
        return StreamAudit(caller=None, activities=len(events))
    opens, closes = _span(first)[1] - AUDIT_SLACK_US, _span(last)[0] + AUDIT_SLACK_US
    work = [e for e in events if e is not first and e is not last]
    escaped = []
    for e in work:
        begin, end = _span(e)
        why = "started before the start" if begin < opens else "ended after the end" if end > closes else ""
        if why:
            escaped.append(f"{str(e.get('name', '?'))[:60]} (stream {stream(e)}) {why}")
    others = sum(stream(e) != caller for e in work)
    return StreamAudit(caller=caller, activities=len(work), other_streams=others, escaped=escaped)


def audit_streams(fn: Callable[[], object], head_start_us: float, cycles_per_us: float) -> StreamAudit:
    """One call of `fn` under the CUDA profiler, between two sleep markers on the caller's stream: the first as
    long as the timed runs' head start (work the host queues meanwhile on an unordered stream starts inside it),
    the second as short as possible (queued after the call: work not joined to the caller's stream outlives it)."""
    _cuda_sync()
    with tempfile.TemporaryDirectory(prefix="htam-audit-") as tmp:
        with _profile(activities=[_CPU_ACTIVITY, _CUDA_ACTIVITY]) as prof:
            _cuda_sleep(max(1000, int(head_start_us * cycles_per_us)))
            fn()
            _cuda_sleep(1)
            _cuda_sync()
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text(encoding="utf-8"))
    return streams_of_trace(trace)


def summarise(values: list[float]) -> tuple[float, float]:
    """(median, interquartile range) of samples."""
    if len(values) < 4:
        return statistics.median(values), max(values) - min(values)
    q = statistics.quantiles(values, n=4)
    return statistics.median(values), q[2] - q[0]
