"""Why torch.compile times ~10 % slower in the harness than in h200_baselines.jsonl (NOTES §9): one process, alone
on one GPU, per task: eager and torch.compile timed by triton's do_bench (the file's method) and by the harness's
protocol before 2026-12-01 (kernels_runtime.worker.timing_protocol.time_interleaved with protocol=SYNC_IN_WINDOW: L2 flush, device
synchronise in the window, median of 20; the runtime now uses the head-start protocol, this script's "head-start"),
then the harness protocol again with the worker's launch counter installed. Prints a Markdown table.

With `--cpu-load N`, the harness protocol runs a third time while N busy-looping processes load the host's CPUs.
That is the bench's situation: 14 workers and their Inductor compile processes on 32 cores while one worker holds
the GPU. The harness window contains the host's launch path and the wake-up from the device synchronise, so a
slower host shows up as a slower kernel. The H200 bench of NOTES §12 suggests Python-launched Triton kernels
(Inductor's and the rules library's) suffer from this and ATen's eager kernels do not; this run tests that.

With `--first-table-only --json-out FILE`, only the first table is measured, and each task's row is appended to
FILE as it finishes (a cut run keeps what it measured): the dev-split sweep of NOTES §13, one process per GPU.

Usage (GPU machine):
    python benchmarks/compile_gap.py KERNELBENCH_DIR [--cpu-load N] level1/40_LayerNorm.py level1/88_MinGPTNewGelu.py ...
    python benchmarks/compile_gap.py KERNELBENCH_DIR --first-table-only --json-out rows.jsonl TASK ...
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
from pathlib import Path

import torch
import triton.testing

from htam_graph.kernels_runtime.worker import guards, timing_protocol
from htam_graph.kernels_runtime.worker.taskmod import load_task_module


def _models(path: Path) -> tuple[torch.nn.Module, list[object]]:
    module = load_task_module(path.read_text(encoding="utf-8"), path.stem, {})
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = module.Model(*module.get_init_inputs()).eval()
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    return model, inputs


HEAD_START_CYCLES = 4_000_000  # ~2 ms of GPU clock: the launches of one call queue up behind it


def _queued_median_us(fn: object, runs: int = 20, warmup: int = 3) -> float:
    """The head-start protocol (a candidate fix, not the runtime's): L2 flush, synchronise, then a sleep kernel so
    the GPU is busy while the host launches; start event, call, end event on the same stream, then synchronise.
    The window holds the call's GPU time, not the host's launch path or its wake-up from the synchronise (work on
    side streams would escape it: the runtime would need another defence for that)."""
    flush = torch.empty(
        timing_protocol.l2_flush_bytes(torch.device("cuda")) // 4, dtype=torch.float32, device="cuda"
    )
    for _ in range(warmup):
        fn()  # type: ignore[operator]
    samples = []
    for _ in range(runs):
        flush.fill_(1.0)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(HEAD_START_CYCLES)
        start.record()
        fn()  # type: ignore[operator]
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3)
    return statistics.median(samples)


def _time(path: Path, counter_installed: bool) -> dict[str, float]:
    """Eager and torch.compile of one task: do_bench medians (skipped once the launch counter is installed),
    harness-protocol medians and the compile warm-up time, in µs / s."""
    model, inputs = _models(path)
    out: dict[str, float] = {}
    with torch.no_grad():
        t0 = time.perf_counter()
        compiled = torch.compile(model)
        compiled(*inputs)
        torch.cuda.synchronize()
        out["warm_s"] = time.perf_counter() - t0
        fns = {"eager": lambda: model(*inputs), "compile": lambda: compiled(*inputs)}
        if not counter_installed:
            for name, fn in fns.items():
                out[f"db_{name}"] = triton.testing.do_bench(fn, return_mode="median") * 1e3
        h = timing_protocol.time_interleaved(
            fns, torch.device("cuda"), runs=20, warmup=3, protocol=timing_protocol.SYNC_IN_WINDOW
        )
        for name in fns:
            out[f"h_{name}"] = h.median_us(name)
            out[f"q_{name}"] = _queued_median_us(fn=fns[name])
    torch.cuda.empty_cache()
    return out


def _load_table(kb: Path, tasks: list[str]) -> None:
    print("| task | harness eager µs | harness compile µs | head-start eager µs | head-start compile µs |")
    print("|---|---:|---:|---:|---:|")
    for rel in tasks:
        r = _time(kb / rel, counter_installed=True)
        print(
            f"| {rel} | {r['h_eager']:.1f} | {r['h_compile']:.1f} | {r['q_eager']:.1f} | {r['q_compile']:.1f} |",
            flush=True,
        )


def _spin() -> None:
    while True:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernelbench", type=Path)
    parser.add_argument("tasks", nargs="+", help="task files relative to KERNELBENCH")
    parser.add_argument("--cpu-load", type=int, default=0, help="busy processes during a third harness pass")
    parser.add_argument(
        "--first-table-only", action="store_true", help="skip the launch-counter and load passes"
    )
    parser.add_argument(
        "--json-out", type=Path, help="append each task's first-table row to this JSON Lines file"
    )
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    kb = args.kernelbench
    print(
        f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}, fp32, TF32 off"
    )
    print(
        "| task | do_bench eager µs | do_bench compile µs | harness eager µs | harness compile µs "
        "| head-start eager µs | head-start compile µs | warm-up s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for rel in args.tasks:
        try:
            r = _time(kb / rel, counter_installed=False)
        except Exception as e:  # one task's failure (an Inductor error, OOM) must not end the sweep
            print(f"| {rel} | failed: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''} |")
            torch.cuda.empty_cache()
            continue
        ratios.append(r["h_compile"] / r["db_compile"])
        if args.json_out is not None:
            with args.json_out.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"task": rel, "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                                    **r}) + "\n")  # fmt: skip
        print(
            f"| {rel} | {r['db_eager']:.1f} | {r['db_compile']:.1f} | {r['h_eager']:.1f} | {r['h_compile']:.1f} "
            f"| {r['q_eager']:.1f} | {r['q_compile']:.1f} | {r['warm_s']:.1f} |",
            flush=True,
        )
    if ratios:
        print(
            f"\nharness/do_bench compile ratio: median {statistics.median(ratios):.3f} over {len(ratios)} tasks\n"
        )
    if args.first_table_only:
        return
    guards.LaunchCounter().install()
    print("With the worker's launch counter installed (harness protocol, then the head-start protocol):\n")
    _load_table(kb, args.tasks)
    if args.cpu_load:
        spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.cpu_load)]
        for proc in spinners:
            proc.start()
        try:
            print(
                f"\nBoth protocols with {args.cpu_load} busy processes on {multiprocessing.cpu_count()} CPUs:\n"
            )
            _load_table(kb, args.tasks)
        finally:
            for proc in spinners:
                proc.terminate()


if __name__ == "__main__":
    main()
