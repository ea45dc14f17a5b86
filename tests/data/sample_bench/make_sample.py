"""Regenerates the SYNTHETIC sample bench folder next to this file (bench.json, results.jsonl, memory/).

Nothing here was measured: timings and speedups are drawn from a seeded random generator with plausible
magnitudes, so the report and the notebook have a realistic folder to work on in tests and examples.

    /work/venv/bin/python tests/data/sample_bench/make_sample.py  # deterministic (the manifest's created_ms aside)

The memory bank is made by seeding a throw-away embedded FalkorDB with the packaged seed memory, recording the
synthetic trajectories as attempts (the real `memory.record_attempts` path) and exporting it (`bank.export_bank`).
"""

from __future__ import annotations

import json
import math
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TASKS = [
    ("kernelbench/level1/20_LeakyReLU", 1, ["elementwise", "activation"], 310.0),
    ("kernelbench/level1/23_Softmax", 1, ["reduction", "softmax"], 520.0),
    ("kernelbench/level1/36_RMSNorm_", 1, ["reduction", "normalization"], 880.0),
    ("kernelbench/level1/40_LayerNorm", 1, ["reduction", "normalization"], 1450.0),
    ("kernelbench/level2/12_Gemm_Multiply_LeakyReLU", 2, ["matmul", "elementwise"], 240.0),
    ("kernelbench/level2/14_Gemm_Divide_Sum_Scaling", 2, ["matmul", "reduction"], 205.0),
]
POLICIES = ("htam", "random")
SEEDS = (0, 1)
STEPS = 5
FAVOURED = ("fusion", "reduction_structure", "memory_access", "parallelism")  # what "htam" picks more often
STARTED_MS = 1_760_000_000_000
FAILED = {  # (policy, seed, task) -> (status, error): runs that returned nothing, as real benches have
    ("random", 1, "kernelbench/level2/14_Gemm_Divide_Sum_Scaling"): (
        "error",
        "worker died: CUDA error: an illegal memory access",
    ),
    ("htam", 0, "kernelbench/level1/40_LayerNorm"): ("timeout", "run exceeded its 900 s budget"),
}


def _locals_by_global() -> dict[str, list[str]]:
    from htam_graph.seed import load_seed

    out: dict[str, list[str]] = {}
    for loc in load_seed().locals:
        out.setdefault(loc.global_key, []).append(loc.key)
    return out


def _trajectory(rng: random.Random, policy: str, locals_: dict[str, list[str]]) -> list[dict[str, Any]]:
    steps, best = [], 1.0
    globals_ = sorted(locals_)
    for step in range(1, STEPS + 1):
        pool = list(FAVOURED) if policy == "htam" and rng.random() < 0.75 else globals_
        g = rng.choice(pool)
        local = rng.choice(locals_[g])
        roll = rng.random()
        fail = roll < (0.2 if policy == "htam" else 0.35)
        if fail:
            kind = rng.choice(["compile_error", "mismatch", "runtime_error"])
            steps.append(_step(step, g, local, "failed", kind, None, best, 0.0))
            continue
        speed = round(math.exp(rng.gauss(0.25 if policy == "htam" else 0.0, 0.45)), 3)
        gain = math.log(speed / best)
        status = "improved" if speed > best else "correct"
        best = max(best, speed)
        steps.append(_step(step, g, local, status, None, speed, best, round(gain, 4)))
    return steps


def _step(
    step: int,
    g: str,
    local: str,
    status: str,
    kind: str | None,
    speed: float | None,
    best: float,
    gain: float,
) -> dict[str, Any]:
    return {
        "step": step,
        "global": g,
        "local": local,
        "status": status,
        "error_kind": kind,
        "speedup_x": speed,
        "best_speedup_x": best,
        "gain": gain,
    }


def _result(
    rng: random.Random,
    task: tuple[str, int, list[str], float],
    policy: str,
    seed: int,
    locals_: dict[str, list[str]],
) -> dict[str, Any]:
    key, level, tags, eager = task
    compile_us = round(eager / math.exp(rng.gauss(0.15, 0.2)), 1)
    sol = round(eager / rng.uniform(6.0, 12.0), 1)  # a speed-of-light floor no synthetic kernel beats
    base: dict[str, Any] = {
        "task": key,
        "level": level,
        "op_tags": tags,
        "policy": policy,
        "seed": seed,
        "backend": "rules",
        "model": "rules",
        "steps": STEPS,
        "device": "cuda",
        "shape": "default",
        "gpu_name": "NVIDIA H200",
        "torch_version": "2.11.0+cu130",
        "timing_on_cpu": False,
        "rtol": 1e-4,
        "atol": 1e-4,
        "ref_eager_us": eager,
        "ref_compile_us": compile_us,
        "sol_us": sol,
        "usage": {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "cost_known": True},
        "wall_s": round(rng.uniform(40, 120), 1),
    }
    failed = FAILED.get((policy, seed, key))
    if failed:  # a run that crashed or timed out: nothing returned
        return {
            **base,
            "status": failed[0],
            "error": failed[1],
            "best_is_reference": True,
            "best_step": None,
            "best_speedup_eager_x": None,
            "best_speedup_compile_x": None,
            "best_runtime_us": None,
            "correct_steps": 0,
            "compile_failures": 0,
            "trajectory": [],
        }
    traj = _trajectory(rng, policy, locals_)
    best = max([s["best_speedup_x"] for s in traj] or [1.0])
    reference = best <= 1.0
    best_step = None if reference else next(s["step"] for s in traj if s["speedup_x"] == best)
    runtime = eager if reference else round(eager / best, 2)
    return {
        **base,
        "status": "done",
        "error": None,
        "best_is_reference": reference,
        "best_step": best_step,
        "best_speedup_eager_x": 1.0 if reference else best,
        "best_speedup_compile_x": round(compile_us / runtime, 4),
        "best_runtime_us": runtime,
        "correct_steps": sum(1 for s in traj if s["status"] != "failed"),
        "compile_failures": sum(1 for s in traj if s["error_kind"] == "compile_error"),
        "trajectory": traj,
    }


def _bench_json() -> dict[str, Any]:
    return {
        "format_version": 1,
        "synthetic": True,
        "note": "SYNTHETIC sample for tests and examples: nothing in this folder was measured.",
        "command": "tests/data/sample_bench/make_sample.py",
        "selectors": ["synthetic"],
        "task_keys": [t[0] for t in TASKS],
        "backend": "rules",
        "model": "rules",
        "policies": list(POLICIES),
        "steps": STEPS,
        "device": "cuda",
        "shape": "default",
        "seeds": list(SEEDS),
        "workers": 1,
        "executor": "local",
        "frozen_memory": False,
        "precision_policy": "fp32-strict",
        "dtype": "fp32",
        "rtol": 1e-4,
        "atol": 1e-4,
        "timing_method": "SYNTHETIC (not measured); the real bench: CUDA events, L2 flushed, median of 20 runs",
        "gpu_name": "NVIDIA H200",
        "torch_version": "2.11.0+cu130",
        "triton_version": "3.5.0",
        "htam_graph_version": "0.1.0",
        "started_ms": STARTED_MS,
        "finished_ms": STARTED_MS + 3_600_000,
    }


def _export_memory(results: list[dict[str, Any]], folder: Path) -> None:
    from htam_graph import bank, memory
    from htam_graph.model import AttemptRecord, RunRecord
    from htam_graph.store.embedded import EmbeddedServer
    from htam_graph.store.falkordb_store import FalkorDBStore

    home = Path(tempfile.mkdtemp(prefix="htam-sample-", dir="/tmp"))
    server = EmbeddedServer(home)
    info = server.start()
    try:
        store = FalkorDBStore(info.socket_path, "sample")
        store.apply_schema()
        memory.ensure_seeded(store)
        for n, r in enumerate(results):
            run_key = f"sample/{r['task']}/{r['policy']}/{r['seed']}"
            memory.record_run(
                store,
                RunRecord(
                    key=run_key,
                    task_key=r["task"],
                    backend="rules",
                    policy=r["policy"],
                    model="rules",
                    started_ms=STARTED_MS + n,
                    gpu_name="NVIDIA H200",
                    gpu_arch="sm_90",
                    seed=r["seed"],
                ),
            )
            prev_g, prev_a, records = None, None, []
            for s in r["trajectory"]:
                akey = f"{run_key}/step{s['step']}"
                ok = s["status"] != "failed"
                records.append(
                    AttemptRecord(
                        key=akey,
                        run_key=run_key,
                        task_key=r["task"],
                        step=s["step"],
                        global_key=s["global"],
                        local_key=s["local"],
                        prev_global_key=prev_g,
                        prev_attempt_key=prev_a,
                        status=s["status"],
                        error_kind=s["error_kind"],
                        compiled=s["error_kind"] != "compile_error",
                        correct=ok,
                        speedup_x=s["speedup_x"],
                        gain=s["gain"],
                        gpu_name="NVIDIA H200",
                        gpu_arch="sm_90",
                        created_ms=STARTED_MS + 1000 * n + s["step"],
                    )
                )
                prev_g, prev_a = s["global"], akey
            memory.record_attempts(store, records)
        folder.mkdir(parents=True, exist_ok=True)
        bank.export_bank(store, folder / "bank.jsonl")
        store.delete_graph()
        store.close()
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    rng = random.Random(20260101)
    locals_ = _locals_by_global()
    results = [_result(rng, t, p, s, locals_) for p in POLICIES for s in SEEDS for t in TASKS]
    (HERE / "bench.json").write_text(json.dumps(_bench_json(), indent=2) + "\n", encoding="utf-8")
    with (HERE / "results.jsonl").open("w", encoding="utf-8") as f:
        for r in results:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    if (HERE / "memory").exists():
        shutil.rmtree(HERE / "memory")
    _export_memory(results, HERE / "memory")


if __name__ == "__main__":
    main()
