"""The wall time of one CPU evaluation at `--shape smoke`, per kind of task and candidate.

    python benchmarks/smoke_eval_cost.py [--candidates FILE ...] [--timeout-s 600]

Target (README, "Set-up"): one evaluation under a minute for every kind of task, so that a two-step smoke run
of `htam-graph run --device cpu --shape smoke` ends in minutes. The candidates are hand-written Triton kernels
of the kinds a model writes (a direct convolution, a tiled GEMM + GroupNorm, a row log-softmax, elementwise
ops): under Triton's interpreter their cost follows the work of the shape variant, not the speed of the
reference's oneDNN kernels, so they are what the smoke caps must be sized for. Each evaluation uses the loop's
CPU request (5 correctness trials, one extra shape variant, 3 timed runs) in a fresh cache folder (cold: the
shape search runs too). The table gives the chosen smoke overrides, the reference's matmul/conv FLOPs there
and the evaluation's wall time, then each evaluation's worker phases and the kernel launches the worker counted
over the whole evaluation (its `kernel_launched` check).

The convolution is timed in implicit-GEMM form (one program per image, output-pixel tile and output-channel
tile; blocks of 64 window taps per `tl.dot`). `benchmarks/candidates/triton_conv2d_direct.py`, the per-tap
design (one program per image, output channel and pixel tile; one window tap per loop iteration), is left out
of the default list: under the interpreter one of its programs takes about 3 s and a smoke call runs 192 of
them, so an evaluation (17 calls) takes hours. Pass it with `--candidates` to see it time out.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from htam_graph.kernels_runtime.parent.corpus import candidate_task
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.kernels_runtime.worker import shapes
from htam_graph.kernels_runtime.worker.refprobe import probe_cpu
from htam_graph.model import EvalRequest

REPO = Path(__file__).resolve().parents[1]
KERNELBENCH = REPO / "tests" / "data" / "kernelbench"
DEFAULT_CANDIDATES = [
    REPO / "benchmarks/candidates/triton_conv2d_implicit_gemm.py",
    REPO / "benchmarks/candidates/triton_gemm_groupnorm.py",
    REPO / "tests/data/candidates/triton_log_softmax.py",
    REPO / "tests/data/candidates/triton_leaky_relu.py",
]


Row = tuple[str, str, dict[str, object], int, float, str, str, str]


def evaluate_one(path: Path, timeout_s: float) -> Row:
    """(candidate, task, smoke overrides, reference FLOPs there, evaluation wall s, verdict, worker phases,
    the worker's kernel-launch count)."""
    source = path.read_text(encoding="utf-8")
    task = candidate_task(source) or ""
    task_source = (KERNELBENCH / task).read_text(encoding="utf-8")
    spec = shapes.smoke_overrides(task_source, name=task)
    flops = probe_cpu(task_source, task, spec.overrides).flops
    with tempfile.TemporaryDirectory() as cache:
        request = EvalRequest(task_key=task, task_source=task_source, candidate_source=source, device="cpu",
                              shape="smoke", trials=5, extra_shapes=1, timing_runs=3, measure_baselines=False,
                              timeout_s=timeout_s)  # fmt: skip
        start = time.perf_counter()
        result = SubprocessEvaluator(cache_dir=Path(cache)).evaluate(request)
        wall_s = time.perf_counter() - start
    verdict = "correct" if result.correct else (result.error_kind.value if result.error_kind else "?")
    phases = result.checks.get("phase_s", "").removeprefix("info: ")
    launches = result.checks.get("kernel_launched", "").removeprefix("pass: ")
    return path.name, task, dict(spec.overrides), flops, wall_s, verdict, phases, launches


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--candidates", type=Path, nargs="*", default=DEFAULT_CANDIDATES)
    p.add_argument("--timeout-s", type=float, default=600.0)
    args = p.parse_args()
    os.environ["TRITON_INTERPRET"] = "1"
    rows = [evaluate_one(path, args.timeout_s) for path in args.candidates]
    print(f"{'candidate':<32} {'task':<52} {'MFLOP':>8} {'wall s':>7}  verdict   smoke overrides")
    for name, task, overrides, flops, wall_s, verdict, *_ in rows:
        print(f"{name:<32} {task[:52]:<52} {flops / 1e6:>8.1f} {wall_s:>7.1f}  {verdict:<9} {overrides}")
    for name, *_, phases, launches in rows:
        print(f"{name:<32} worker phases (s): {phases}")
        print(f"{name:<32} launches: {launches}")
    print(f"cpu: {os.cpu_count()} cores, Triton interpreter, fp32, rtol=atol=1e-4, cold cache per evaluation")


if __name__ == "__main__":
    main()
