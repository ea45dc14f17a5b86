"""The wall time of one CPU evaluation at `--shape smoke`, per kind of task and candidate.

    python benchmarks/smoke_eval_cost.py [--candidates FILE ...] [--rules TASK_REL ...] [--timeout-s 600]

Target (README, "Set-up"): one evaluation under a minute for every kind of task, so that a two-step smoke run
of `htam-graph run --device cpu --shape smoke` ends in minutes. The candidates are hand-written Triton kernels
of the kinds a model writes (a direct convolution, a tiled GEMM + GroupNorm, a row log-softmax, elementwise
ops): under Triton's interpreter their cost follows the work of the shape variant, not the speed of the
reference's oneDNN kernels, so they are what the smoke caps must be sized for. Each evaluation uses the loop's
CPU request (5 correctness trials, one extra shape variant, 3 timed runs) in a fresh cache folder (cold: the
shape search runs too). The table gives the chosen smoke overrides, the reference's matmul/conv FLOPs there
and the evaluation's wall time, then each evaluation's worker phases and the kernel launches the worker counted
over the whole evaluation (its `kernel_launched` check).

`--rules level1/42_Max_Pooling_2D.py ...` times the rules backend's own kernels instead (or as well, with
`--candidates`): for each KernelBench dev task (a path under tests/data/kernelbench), the first recipe of the
rules generator's registry that applies to it, tuning recipes left out (they need a base kernel), emitted with
its default configuration and evaluated as above; the row names the recipe's key.

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

from htam_graph.importers.kernelbench import parse_task
from htam_graph.kernels_runtime.parent.corpus import candidate_task
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.kernels_runtime.worker import shapes
from htam_graph.kernels_runtime.worker.refprobe import probe_cpu
from htam_graph.model import EvalRequest, Task
from htam_graph.rules.generator import RulesGenerator, task_view
from htam_graph.rules.recipes import TuningRecipe, default_recipes

REPO = Path(__file__).resolve().parents[1]
KERNELBENCH = REPO / "tests" / "data" / "kernelbench"
DEFAULT_CANDIDATES = [
    REPO / "benchmarks/candidates/triton_conv2d_implicit_gemm.py",
    REPO / "benchmarks/candidates/triton_gemm_groupnorm.py",
    REPO / "tests/data/candidates/triton_log_softmax.py",
    REPO / "tests/data/candidates/triton_leaky_relu.py",
]


Row = tuple[str, str, dict[str, object], int, float, str, str, str]


def evaluate_file(path: Path, timeout_s: float) -> Row:
    """The evaluation of a candidate file, on the task its header names."""
    source = path.read_text(encoding="utf-8")
    return evaluate_source(path.name, candidate_task(source) or "", source, timeout_s)


def evaluate_rules(task_rel: str, timeout_s: float) -> Row:
    """The evaluation of the rules backend's first applicable kernel for the task, named by its recipe."""
    key, source = rules_candidate(task_rel)
    return evaluate_source(key, task_rel, source, timeout_s)


def rules_candidate(task_rel: str) -> tuple[str, str]:
    """(recipe key, ModelNew source) of the first non-tuning recipe in registry order that applies to the
    task, emitted with its default configuration."""
    task = parse_task(KERNELBENCH / task_rel, KERNELBENCH)
    if not isinstance(task, Task):
        raise SystemExit(f"{task_rel}: not a task: {task}")
    recipes = default_recipes()
    keys = [k for k in RulesGenerator(recipes).recipes_for(task) if not isinstance(recipes[k], TuningRecipe)]
    if not keys:
        raise SystemExit(f"{task_rel}: no rules recipe applies")
    recipe = recipes[keys[0]]
    return recipe.key, recipe.emit(task_view(task), recipe.default_config)


def evaluate_source(name: str, task: str, source: str, timeout_s: float) -> Row:
    """(candidate, task, smoke overrides, reference FLOPs there, evaluation wall s, verdict, worker phases,
    the worker's kernel-launch count) of one CPU evaluation of `source` on `task`, a path under KERNELBENCH."""
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
    return name, task, dict(spec.overrides), flops, wall_s, verdict, phases, launches


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--candidates", type=Path, nargs="*", default=None, help="default: the list above")
    p.add_argument("--rules", nargs="+", default=[], metavar="TASK_REL", help="e.g. level1/40_LayerNorm.py")
    p.add_argument("--timeout-s", type=float, default=600.0)
    args = p.parse_args()
    os.environ["TRITON_INTERPRET"] = "1"
    candidates = args.candidates if args.candidates is not None else [] if args.rules else DEFAULT_CANDIDATES
    rows = [evaluate_file(path, args.timeout_s) for path in candidates]
    rows += [evaluate_rules(task, args.timeout_s) for task in args.rules]
    print_table(rows)


def print_table(rows: list[Row]) -> None:
    """The summary table, then each evaluation's worker phases and kernel launches."""
    w = max([len("candidate"), *(len(row[0]) for row in rows)])
    t = max([len("task"), *(len(row[1]) for row in rows)])
    print(f"{'candidate':<{w}} {'task':<{t}} {'MFLOP':>8} {'wall s':>7}  verdict   smoke overrides")
    for name, task, overrides, flops, wall_s, verdict, *_ in rows:
        print(f"{name:<{w}} {task:<{t}} {flops / 1e6:>8.1f} {wall_s:>7.1f}  {verdict:<9} {overrides}")
    for name, *_, phases, launches in rows:
        print(f"{name:<{w}} worker phases (s): {phases}")
        print(f"{name:<{w}} launches: {launches}")
    print(f"cpu: {os.cpu_count()} cores, Triton interpreter, fp32, rtol=atol=1e-4, cold cache per evaluation")


if __name__ == "__main__":
    main()
