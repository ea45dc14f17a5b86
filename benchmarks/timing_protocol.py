#!/usr/bin/env python
"""GPU check and benchmark of the runtime's timing protocol (kernels_runtime/worker/timing_protocol.py), in one process.

    python benchmarks/timing_protocol.py [KERNELBENCH_TASK.py ...]

For a large matmul, a small elementwise op, a 20-kernel Python loop and the eager forward of any task files given,
a table in µs: triton's do_bench, events around 10 back-to-back calls, the head-start GPU time, the host launch
time, the runtime's time (the larger of the two, or the sync-in-window re-time for callables that block on the
device), the sync-in-window time, the head start measured and the runs where the host launch outlasted it.
Then the stream audit: work on the caller's stream and a forked-and-joined side stream must pass; an unordered
and an unjoined side stream must fail; long side-stream work must fail the wall cross-check. Exit 1 when an audit
or the cross-check says the wrong thing. Run on the H200: results/h200/runtime/2026-11-30_head_start/.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
import triton.testing

from htam_graph.kernels_runtime.worker import timing_protocol
from htam_graph.kernels_runtime.worker.taskmod import load_task_module


def _task_callables(paths: list[Path]) -> dict[str, Callable[[], object]]:
    """The eager forward of each KernelBench task file at its default sizes."""
    fns: dict[str, Callable[[], object]] = {}
    for path in paths:
        module = load_task_module(path.read_text(encoding="utf-8"), path.stem, {})
        torch.manual_seed(0)
        with torch.device("cuda"):
            model = module.Model(*module.get_init_inputs()).eval()
            inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]

        def forward(model: Any = model, inputs: list[Any] = inputs) -> object:
            with torch.no_grad():
                return model(*inputs)

        fns[path.stem[:40]] = forward
    return fns


def _back_to_back_us(fn: Callable[[], object], calls: int = 10) -> float:
    """Events around `calls` back-to-back calls (no flush, no synchronise between them), per call."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "tasks", nargs="*", type=Path, help="KernelBench task files: their eager forward, too"
    )
    args = parser.parse_args()
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}, fp32")
    a, b = torch.randn(4096, 4096, device=dev), torch.randn(4096, 4096, device=dev)
    x = torch.randn(1 << 16, device=dev)
    fns = {
        "matmul 4096": lambda: a @ b,
        "relu 64k": lambda: torch.relu(x),
        "20 small ops": lambda: [x.mul(1.0001) for _ in range(20)],
        **_task_callables(args.tasks),
    }
    hs = timing_protocol.time_interleaved(fns, dev, runs=20, warmup=3)
    sw = timing_protocol.time_interleaved(
        fns, dev, runs=20, warmup=3, protocol=timing_protocol.SYNC_IN_WINDOW
    )
    print("| callable | do_bench µs | back-to-back µs | head-start GPU µs | host launch µs | runtime's time µs "
          "| sync-in-window µs | head start ms | starved runs | wall problem |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, fn in fns.items():
        db = triton.testing.do_bench(fn, return_mode="median") * 1e3
        print(f"| {name} | {db:.1f} | {_back_to_back_us(fn):.1f} | {hs.median_us(name):.1f} "
              f"| {hs.host_launch_us(name):.1f} | {hs.time_us(name):.1f} | {sw.median_us(name):.1f} "
              f"| {hs.head_start_us[name] / 1e3:.2f} | {hs.starved_runs[name]}{' (re-timed sync-in-window)' if name in hs.sync_in_window else ''} "
              f"| {hs.wall_problem(name)} |")  # fmt: skip
    ok = True
    plain = timing_protocol.audit_streams(lambda: torch.relu(x), 1000.0, hs.cycles_per_us)
    print(f"audit, caller's stream: observed={plain.observed} caller={plain.caller} activities={plain.activities} "
          f"problem={plain.problem()}")  # fmt: skip
    ok &= plain.observed and plain.problem() is None and plain.activities >= 1
    side = torch.cuda.Stream()

    def on_side() -> None:
        with torch.cuda.stream(side):
            torch.relu(x)

    audit = timing_protocol.audit_streams(on_side, 1000.0, hs.cycles_per_us)
    print(f"audit, side stream: observed={audit.observed} problem={audit.problem()}")
    ok &= audit.observed and audit.problem() is not None

    def forked_and_joined() -> None:  # what cuDNN does for its FFT engines: inside the window, must pass
        caller = torch.cuda.current_stream()
        side.wait_stream(caller)
        with torch.cuda.stream(side):
            y = torch.relu(x)
        caller.wait_stream(side)
        y.record_stream(caller)

    joined = timing_protocol.audit_streams(forked_and_joined, 1000.0, hs.cycles_per_us)
    print(f"audit, forked and joined side stream: observed={joined.observed} problem={joined.problem()} "
          f"({joined.describe()})")  # fmt: skip
    ok &= joined.observed and joined.problem() is None and joined.other_streams >= 1

    def unjoined() -> None:  # ordered after the start, never joined: must fail
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000)  # ~100 µs: shorter than the wall check's slack

    late = timing_protocol.audit_streams(unjoined, 1000.0, hs.cycles_per_us)
    print(f"audit, unjoined side stream: observed={late.observed} problem={late.problem()}")
    ok &= late.observed and late.problem() is not None

    def long_side() -> None:
        with torch.cuda.stream(side):
            torch.cuda._sleep(20_000_000)  # ~10 ms on the side stream, nothing on the caller's

    t = timing_protocol.time_interleaved({"long side": long_side}, dev, runs=5, warmup=1)
    print(f"long side-stream work: event {t.median_us('long side'):.1f} µs, wall {t.wall_us['long side'][0]:.1f} µs, "
          f"wall problem: {t.wall_problem('long side')}")  # fmt: skip
    ok &= t.wall_problem("long side") is not None
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
