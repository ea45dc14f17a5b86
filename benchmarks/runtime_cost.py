"""Where the wall time of one evaluation goes: spawn, compile, correctness, timing (Triton and CUDA, cold and warm).

    python benchmarks/runtime_cost.py [--device cpu|cuda] [--kernelbench DIR]

On the CPU only the Triton candidate runs (interpreter, smoke shapes; CUDA C++ is reported unsupported); the GPU
run (default shapes) is done by the lead. "cold" uses a fresh cache folder (Triton cache, torch extensions),
"warm" re-evaluates the same source with the cache left by the cold run. Phases come from the worker's
`phase_s` record; spawn = total wall − the worker's own wall time (process start, imports, result hand-back).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from htam_graph.kernels_runtime.parent.corpus import candidate_task
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.kernels_runtime.recorder import phase_seconds
from htam_graph.model import EvalRequest

REPO = Path(__file__).resolve().parents[1]
CANDIDATES = {
    "triton": REPO / "tests/data/candidates/triton_tanh.py",
    "cuda": REPO / "tests/data/candidates/cuda_tanh.py",
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument(
        "--kernelbench",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "tests" / "data" / "kernelbench",
    )
    args = p.parse_args()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    shape = "smoke" if args.device == "cpu" else "default"
    rows = []
    for lang, path in CANDIDATES.items():
        source = path.read_text(encoding="utf-8")
        task = candidate_task(source) or ""
        task_source = (args.kernelbench / task).read_text(encoding="utf-8")
        with tempfile.TemporaryDirectory() as cache:
            ev = SubprocessEvaluator(cache_dir=Path(cache))
            for state in ("cold", "warm"):
                req = EvalRequest(task_key=task, task_source=task_source, candidate_source=source, device=args.device,
                                  shape=shape, trials=5, extra_shapes=1, timing_runs=20, measure_baselines=False)  # fmt: skip
                r = ev.evaluate(req)
                ph = phase_seconds(r.checks)
                worker = sum(v for k, v in ph.items() if "." not in k)  # "a.b" are parts of phase "a"
                rows.append((lang, state, r, ph, (r.wall_s or 0.0) - worker))
    print(f"{'candidate':<8} {'cache':<5} {'verdict':<22} {'wall s':>7} {'spawn s':>8} {'compile s':>9} "
          f"{'variants':>8} {'correct s':>9} {'timing s':>8} {'recheck':>8}")  # fmt: skip
    for lang, state, r, ph, spawn in rows:
        verdict = "correct" if r.correct else (r.error_kind.value if r.error_kind else "?")
        if r.error_kind and r.error_kind.value == "unsupported_on_device":
            print(f"{lang:<8} {state:<5} {verdict:<22} {r.wall_s or 0:>7.2f}   (not compiled on the CPU)")
            continue
        print(f"{lang:<8} {state:<5} {verdict:<22} {r.wall_s or 0:>7.2f} {spawn:>8.2f} {r.compile_s or 0:>9.2f} "
              f"{ph.get('variants', 0):>8.2f} {ph.get('correctness', 0):>9.2f} {ph.get('timing', 0):>8.2f} {ph.get('recheck', 0):>8.2f}")  # fmt: skip
    for lang, state, _r, ph, _ in rows:
        parts = ", ".join(
            f"{k.split('.', 1)[1]} {v:.2f}" for k, v in ph.items() if k.startswith("correctness.")
        )
        if parts:
            print(f"{lang:<8} {state:<5} correctness s: {parts}")
    print(
        f"device={args.device} shape={shape}; compile s = candidate import + first forward (Triton JIT / load_inline)"
    )


if __name__ == "__main__":
    main()
