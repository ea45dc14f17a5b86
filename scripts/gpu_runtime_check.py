#!/usr/bin/env python
"""Self-check of the kernel runtime on one GPU (the lead runs it on the H200; no graph database needed).

    python scripts/gpu_runtime_check.py --out "$OUT" [--kernelbench DIR] [--tasks level1/2_...py ...]
                                        [--skip-compile] [--budget-s 420] [--sections adv,good,refs,base]

Writes `runtime_gpu_check.json` and `runtime_gpu_check.md` into --out (the JSON after every section, so a cut
run still reports). Sections run most important first and are skipped, saying so, when the budget is gone (see
htam_graph.kernels_runtime.parent.selfcheck): reference-as-candidate noise floor on ~10 level1/level2 tasks, the
hand-written Triton and CUDA candidates (CUDA pre-built in parallel; first and warm evaluation), every adversarial
candidate (must be rejected with its expected kind), and eager/torch.compile baselines of the level1/level2 dev
tasks against h200_baselines.jsonl while the budget lasts (one pass: eager and torch.compile timed interleaved in
one process per task, 20 timed runs each). Exit code 0 when every adversarial file was rejected as
expected and every good candidate passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = [
    "level1/2_Standard_matrix_multiplication_.py", "level1/22_Tanh.py", "level1/24_LogSoftmax.py",
    "level1/40_LayerNorm.py", "level1/48_Mean_reduction_over_a_dimension.py", "level1/50_conv_standard_2D__square_input__square_kernel.py",
    "level2/12_Gemm_Multiply_LeakyReLU.py", "level2/40_Matmul_Scaling_ResidualAdd.py", "level2/52_Conv2d_Activation_BatchNorm.py",
    "level2/86_Matmul_Divide_GELU.py",
]  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--kernelbench",
        type=Path,
        default=Path(
            os.environ.get(
                "HTAM_KERNELBENCH",
                str(Path(__file__).resolve().parents[1] / "tests" / "data" / "kernelbench"),
            )
        ),
    )
    p.add_argument(
        "--tasks", nargs="*", default=None, help="baseline tasks (default: every level1/level2 file)"
    )
    p.add_argument("--skip-compile", action="store_true", help="no torch.compile baselines")
    p.add_argument(
        "--budget-s", type=float, default=420.0, help="wall budget (s); baselines stop when it runs out"
    )
    p.add_argument("--sections", default="refs,good,adv,base")
    args = p.parse_args()

    import torch
    import triton

    from htam_graph.kernels_runtime.parent import selfcheck
    from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator

    if not torch.cuda.is_available():
        print("no CUDA device: this script measures a GPU", file=sys.stderr)
        return 1
    deadline = selfcheck.Deadline(args.budget_s)
    args.out.mkdir(parents=True, exist_ok=True)
    ev = SubprocessEvaluator(cache_dir=args.out / "cache")
    kb = args.kernelbench
    sections = set(args.sections.split(","))
    report: dict[str, object] = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
    }
    timings: dict[str, float] = {}

    def run(name: str, fn):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        report[name] = fn()
        timings[name] = time.perf_counter() - start
        (args.out / "runtime_gpu_check.json").write_text(
            json.dumps({**report, "section_s": timings}, indent=2, default=str)
        )
        print(f"{name}: {timings[name]:.0f} s", flush=True)

    # Most important first; a section is skipped (and says so) when the budget is gone.
    def allowed(name: str, need_s: float) -> bool:
        if name not in sections:
            return False
        if deadline.left() < need_s:
            report[f"{name}_skipped"] = f"budget left {deadline.left():.0f} s < {need_s:.0f} s"
            return False
        return True

    if allowed("adv", 60):
        run("adversarial", lambda: selfcheck.adversarial(ev, kb, REPO / "tests/data/adversarial"))
    if allowed("good", 60):
        run("good_candidates", lambda: selfcheck.good_candidates(ev, kb, REPO / "tests/data/candidates"))
    if allowed("refs", 45):
        run(
            "reference_sample",
            lambda: selfcheck.reference_sample(ev, kb, [t for t in SAMPLE if (kb / t).exists()]),
        )
    if "base" in sections:
        tasks = args.tasks or sorted(
            str(f.relative_to(kb)) for lvl in ("level1", "level2") for f in (kb / lvl).glob("*.py")
        )
        run("baselines", lambda: selfcheck.baselines(ev, kb, tasks, deadline, not args.skip_compile))
    report["section_s"] = timings
    (args.out / "runtime_gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
    (args.out / "runtime_gpu_check.md").write_text(selfcheck.summary_markdown(report))
    adv_rows = report.get("adversarial", [])
    # An empty section proves nothing: it fails the check (seen once: a device-name mismatch skipped every file).
    adv_ok = bool(adv_rows) and all(r["ok"] for r in adv_rows)  # type: ignore[union-attr]
    good_ok = all(
        r.get("correct", True) for r in report.get("good_candidates", []) if "pre-build" not in r["name"]
    )  # type: ignore[union-attr]
    print(selfcheck.summary_markdown(report))
    return 0 if adv_ok and good_ok else 1


if __name__ == "__main__":
    sys.exit(main())
