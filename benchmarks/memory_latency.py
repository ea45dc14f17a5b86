"""Memory latency on the embedded FalkorDB: policy scoring and single-attempt updates at 10^3..10^5 attempts.

    python benchmarks/memory_latency.py [--sizes 1000,10000,100000] [--calls 200]

Starts its own embedded server in a temporary HTAM_HOME (removed afterwards), seeds the packaged memory, grows
one graph to each size with `record_attempts` batches of 1000 synthetic attempts (random tasks, directions,
strategies, statuses, GPU archs, 200-byte kernel sources), and at each size measures
- scoring: `store.run("policy_score", ...)` (the query alone) and `memory.score_directions` (query + candidate
  keys + softmax), over `--calls` random histories of length K;
- update: `memory.record_attempt` of one new attempt (7 statements: key check, Gpu, merge, link, stats,
  evidence, transition), over 100 calls.
Prints a Markdown table of p50 / p95 in milliseconds (wall clock, `time.perf_counter`).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from htam_graph import memory, policy
from htam_graph.model import AttemptRecord, SeedMemory
from htam_graph.seed import load_seed
from htam_graph.settings import PolicySettings
from htam_graph.store.embedded import EmbeddedServer
from htam_graph.store.falkordb_store import FalkorDBStore

ARCHS = ("sm_90", "sm_90", "sm_90", "sm_80", "sm_100")
STATUS = ("improved", "correct", "failed", "failed")


def synthetic(seed: SeedMemory, rng: random.Random, start: int, n: int) -> list[AttemptRecord]:
    """n attempts with keys start..start+n-1, chained per run of 8 steps."""
    locals_by_global: dict[str, list[str]] = {}
    for loc in seed.locals:
        locals_by_global.setdefault(loc.global_key, []).append(loc.key)
    keys = [g.key for g in seed.globals]
    out = []
    for i in range(start, start + n):
        step = i % 8
        g = rng.choice(keys)
        status = rng.choice(STATUS)
        ok = status != "failed"
        compiled = ok or rng.random() < 0.6
        out.append(
            AttemptRecord(
                key=f"bench-{i}",
                run_key=f"run-{i // 8}",
                task_key=f"task-{(i // 8) % 200}",
                step=step,
                global_key=g,
                local_key=rng.choice(locals_by_global.get(g, [None])),  # type: ignore[list-item]
                prev_global_key=rng.choice(keys) if step else None,
                prev_attempt_key=f"bench-{i - 1}" if step else None,
                status=status,
                compiled=compiled,
                correct=ok,
                gain=rng.uniform(0.01, 0.6)
                if status == "improved"
                else (rng.uniform(-0.3, 0.0) if ok else 0.0),
                error_kind=None if ok else ("compile_error" if not compiled else "mismatch"),
                gpu_arch=rng.choice(ARCHS),
                kernel_language="triton",
                kernel_source=f"# kernel {i}\n" + "x" * 200 if compiled else None,
                created_ms=1_700_000_000_000 + i,
            )
        )
    return out


def percentiles(samples: list[float]) -> tuple[float, float]:
    qs = statistics.quantiles(samples, n=100, method="inclusive")
    return qs[49], qs[94]


def timed(fn: Callable[[], object], calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    home = Path(tempfile.mkdtemp(prefix="htam-bench-", dir="/tmp"))
    server = EmbeddedServer(home)
    info = server.start()
    rng = random.Random(0)
    settings = PolicySettings()
    seed = load_seed()
    keys = [g.key for g in seed.globals]
    rows = []
    try:
        store = FalkorDBStore(info.socket_path, "bench")
        store.apply_schema()
        memory.seed_memory(store, seed)
        have = 0
        for size in sizes:
            t0 = time.perf_counter()
            for start in range(have, size, 1000):
                memory.record_attempts(store, synthetic(seed, rng, start, min(1000, size - start)))
            load_s = time.perf_counter() - t0
            have = size

            def query() -> None:
                hist = [rng.choice(keys) for _ in range(settings.history_k)]
                store.run(
                    "policy_score",
                    {
                        "history": hist,
                        "weights": policy.recency_weights(len(hist), settings.decay),
                        "gpu_arch": "sm_90",
                        "foreign_weight": settings.foreign_weight,
                        "prior_gain": settings.prior_gain,
                        "prior_strength": settings.prior_strength,
                        "compile_penalty": settings.compile_penalty,
                        "no_support_score": settings.no_support_score,
                    },
                )

            def full() -> None:
                hist = [rng.choice(keys) for _ in range(settings.history_k)]
                memory.score_directions(store, hist, gpu_arch="sm_90", settings=settings)

            extra = iter(synthetic(seed, rng, 10_000_000 + size, 100))
            q50, q95 = percentiles(timed(query, args.calls))
            f50, f95 = percentiles(timed(full, args.calls))
            u50, u95 = percentiles(timed(lambda it=extra: memory.record_attempt(store, next(it)), 100))
            edges = store.run_text("MATCH ()-[t:TRANSITION]->() RETURN count(t) AS n")[0]["n"]
            rows.append((size, edges, load_s, q50, q95, f50, f95, u50, u95))
            print(f"size {size}: loaded in {load_s:.1f} s", flush=True)
        store.close()
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
    print()
    print(
        "| attempts | TRANSITION edges | bulk load (s) | policy_score p50 / p95 (ms) "
        "| score_directions p50 / p95 (ms) | record_attempt p50 / p95 (ms) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for size, edges, load_s, q50, q95, f50, f95, u50, u95 in rows:
        print(
            f"| {size:,} | {edges:,} | {load_s:.1f} | {q50:.2f} / {q95:.2f} | {f50:.2f} / {f95:.2f} "
            f"| {u50:.2f} / {u95:.2f} |"
        )


if __name__ == "__main__":
    main()
