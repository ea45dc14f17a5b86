"""`htam-graph bench`: run the HTAM loop over many tasks, policies and seeds into one resumable folder.

    htam-graph bench --tasks kernelbench/level1 --policy htam --policy random --seeds 0,1,2 \\
        --workers 4 --task-timeout 1800 --out bench/l1

Writes DIR/bench.json, DIR/results.jsonl (one line per finished run), DIR/runs/..., and at the end the memory
bank (DIR/memory/bank.jsonl) and the report (DIR/report/). Re-running the same command resumes. See
notes/BENCH_FORMAT.md for the folder contract, `htam_graph/bench/` for the engine.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, cast

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from htam_graph.bench.engine import (
    BENCH_JSON,
    RESULTS,
    BenchSpec,
    Executor,
    ResultsLog,
    Score,
    check_config,
    drive,
    plan_jobs,
    resolve_selectors,
    write_json,
)
from htam_graph.cli.backends import llm_options
from htam_graph.cli.bench_meta import bench_meta
from htam_graph.cli.replies import awaiting_line, courier_for
from htam_graph.cli.run import pick_device
from htam_graph.errors import ConfigError, HtamError
from htam_graph.generators import LLMFlags, make_backend
from htam_graph.loop import PolicyName
from htam_graph.model import Device, Language, PrecisionPolicy, ShapeVariant
from htam_graph.settings import Settings

log = logging.getLogger(__name__)


def _parse_seeds(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    try:
        seeds = [int(s) for s in value.split(",") if s.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers such as 0,1,2, got {value!r}") from None
    if not seeds:
        raise click.BadParameter("at least one seed")
    return list(dict.fromkeys(seeds))


def _gpu_ids() -> list[str]:
    """The GPUs this machine shows the bench (physical ids for CUDA_VISIBLE_DEVICES)."""
    import torch

    n = torch.cuda.device_count()
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[:n] if visible else [str(i) for i in range(n)]


def _make_executor(
    kind: str, device: str, workers: int, task_timeout_s: float | None
) -> tuple[Executor, Device]:
    from htam_graph.bench.executors import LocalExecutor, RayExecutor, gpu_lock_env

    if kind == "ray":
        ray_ex = RayExecutor(task_timeout_s)
        has_gpu = device != "cpu" and ray_ex.cluster_gpus() > 0
        if device == "cuda" and not has_gpu:
            ray_ex.shutdown()
            raise ConfigError("--device cuda: the Ray cluster has no GPU (use --device cpu)")
        resolved: Device = "cuda" if has_gpu else "cpu"
        ray_ex.configure(resolved, gpu_lock_env() if resolved == "cuda" else {})
        return ray_ex, resolved
    resolved = pick_device(device)
    env = gpu_lock_env() if resolved == "cuda" else {}
    gpus = _gpu_ids() if resolved == "cuda" else []
    return LocalExecutor(workers, task_timeout_s, gpu_ids=gpus, env=env), resolved


def _row_line(row: dict[str, Any]) -> str:
    head = f"{row['task']} / {row['policy']} / seed {row['seed']}"
    if row["status"] != "done":
        return f"[red]{row['status']}[/] {head}: {row.get('error') or ''}"
    if row.get("best_is_reference"):
        best = "the reference"
    elif row.get("timing_on_cpu"):
        best = f"correct kernel at step {row.get('best_step')} (CPU: speed not claimed)"
    else:
        best = f"{row.get('best_speedup_eager_x') or 0:.3f}x over eager (step {row.get('best_step')})"
    return f"[green]done[/] {head}: {best} in {row.get('wall_s', 0):.0f} s"


def _score_text(score: Score) -> str:
    if not score.runs:
        return ""
    return f"correct {score.correct:.0%}  fast_1 {score.fast_1:.0%}  geomean {score.geomean_eager_x:.3f}x"


def _finish(
    out: Path, settings: Settings, meta: dict[str, Any], rows: list[dict[str, Any]], console: Console
) -> dict[str, Any]:
    """bench.json's end fields, the memory export, the report. A failure here loses no result."""
    from htam_graph import bank
    from htam_graph.store import store_session

    measured = next((r for r in rows if r.get("gpu_name") or r.get("torch_version")), None)
    if measured is not None:  # what the workers saw is the truth (the driver may not have the GPU)
        for key in ("gpu_name", "torch_version", "rtol", "atol"):
            if measured.get(key):
                meta[key] = measured[key]
    meta["finished_ms"] = int(time.time() * 1000)
    write_json(out / BENCH_JSON, meta)
    done: dict[str, Any] = {"memory": None, "report": None}
    try:
        with store_session(settings) as store:
            bank.export_bank(store, out / "memory" / "bank.jsonl")
        done["memory"] = str(out / "memory" / "bank.jsonl")
    except HtamError as e:
        console.print(f"[yellow]warning[/]: memory export failed: {e}")
    if not rows:  # every run awaits a reply (or none ran): there is nothing to report yet
        return done
    try:
        from htam_graph.report.writer import write_report

        done["report"] = str(write_report(out))
    except Exception as e:  # the results are on disk; `htam-graph report DIR` can be re-run
        log.debug("report failed", exc_info=True)
        console.print(
            f"[yellow]warning[/]: report failed ({type(e).__name__}: {e}); run: htam-graph report {out}"
        )
    return done


@click.command("bench")
@click.argument("more_selectors", nargs=-1, metavar="[SELECTOR]...")
@click.option("--tasks", "selectors", multiple=True, metavar="SELECTOR",
              help="Task key, glob (kernelbench/level1/2*), level (kernelbench/level2) or KernelBench path; "
              "repeatable, and further SELECTORs may follow.")  # fmt: skip
@click.option("--backend", default="rules", show_default=True, help="As for `run`.")
@click.option("--base-url", default=None, help="Base URL of an OpenAI-compatible or Anthropic endpoint.")
@click.option("--policy", "policies", type=click.Choice([p.value for p in PolicyName]), multiple=True,
              help="Repeatable [htam].")  # fmt: skip
@click.option("--steps", type=click.IntRange(1, 100), default=6, show_default=True)
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True)
@click.option("--shape", type=click.Choice(["default", "smoke"]), default="default", show_default=True)
@click.option(
    "--language", type=click.Choice([x.value for x in Language]), default="triton", show_default=True
)
@click.option("--precision", type=click.Choice([p.value for p in PrecisionPolicy]), default="fp32-strict",
              show_default=True)  # fmt: skip
@click.option("--seeds", default="0", show_default=True, callback=_parse_seeds, help="Comma-separated.")
@click.option("--workers", type=click.IntRange(1, 4096), default=1, show_default=True,
              help="Runs at once (local: worker processes spread over the GPUs; ray: tasks in flight)."
              )  # fmt: skip
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="ray: ray.init(address=$RAY_ADDRESS), a local Ray instance when unset.")  # fmt: skip
@click.option("--task-timeout", "task_timeout_s", type=click.FloatRange(min=1), default=None,
              help="Seconds per (task, policy, seed) run; a run past it is killed and recorded as timeout."
              )  # fmt: skip
@click.option(
    "--timeout", "timeout_s", type=float, default=600.0, show_default=True, help="Per candidate, s."
)
@click.option("--frozen-memory", is_flag=True, help="Evaluate a fixed memory: read it, write nothing back.")
@click.option("--budget-usd", type=click.FloatRange(min=0), default=None,
              help="One LLM dollar budget shared by every run (kept in DIR/budget.jsonl across resumes)."
              )  # fmt: skip
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--json", "as_json", is_flag=True,
              help="No progress bar (each run's line still goes to stderr); print a JSON summary at the end."
              )  # fmt: skip
@llm_options
@click.pass_obj
def bench(
    settings: Settings,
    more_selectors: tuple[str, ...],
    selectors: tuple[str, ...],
    backend: str,
    base_url: str | None,
    policies: tuple[str, ...],
    steps: int,
    device: str,
    shape: str,
    language: str,
    precision: str,
    seeds: list[int],
    workers: int,
    executor: str,
    task_timeout_s: float | None,
    timeout_s: float,
    frozen_memory: bool,
    budget_usd: float | None,
    out_dir: Path,
    as_json: bool,
    llm_flags: LLMFlags,
) -> None:
    """Benchmark the loop over many tasks into --out DIR (resumable: re-run the same command to continue; a
    run cut mid-way continues at its next step).

    With --backend files (or a replay file lacking a request) every run stops at the step whose reply it
    awaits, its request written to DIR/runs/.../pending/; the bench ends (exit 0) saying how many await, and
    the same command, once the replies are saved, continues each at that step. With batch:anthropic /
    batch:openai the awaited requests go out as one batch job, are polled for up to --llm-timeout seconds, and
    the runs resume."""
    from htam_graph import memory
    from htam_graph.store import store_session

    all_selectors = [*selectors, *more_selectors]
    if not all_selectors:
        raise click.UsageError("give at least one --tasks SELECTOR")
    console = Console(stderr=True, soft_wrap=True)  # stderr also under --json (stdout: the JSON summary)
    from htam_graph.bench.budget import BenchBudget

    deferred = backend == "files" or backend.startswith("batch:")
    if deferred and executor == "ray":
        raise ConfigError(f"--backend {backend} needs --executor local (a Ray task keeps no run folder)")
    # checks the backend (key, price, command) up front
    _, model, _ = make_backend(backend, budget_usd, base_url, flags=llm_flags)
    budget = BenchBudget(out_dir, budget_usd)
    runner, resolved = _make_executor(executor, device, workers, task_timeout_s)
    try:
        with store_session(settings) as store:
            memory.ensure_seeded(store)  # once, here: workers must not race to seed
            memory.repair_pending(store)  # before any worker writes: a killed worker's half-recorded attempts
            tasks = resolve_selectors(store, all_selectors)
        chosen = [PolicyName(p) for p in dict.fromkeys(policies or (PolicyName.HTAM,))]
        spec = BenchSpec(
            selectors=all_selectors, task_keys=[t.key for t in tasks], backend=backend, model=model,
            policies=list(chosen), steps=steps, device=resolved,
            shape=cast(ShapeVariant, shape), seeds=seeds, workers=workers, executor=executor,
            frozen_memory=frozen_memory, precision_policy=PrecisionPolicy(precision),
            language=Language(language), task_timeout_s=task_timeout_s, candidate_timeout_s=timeout_s,
            base_url=base_url, budget_usd=budget_usd, llm_flags=llm_flags,
        )  # fmt: skip
        meta = bench_meta(spec, out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        stored = check_config(out_dir, meta)
        if stored is not None:
            meta["started_ms"] = stored.get("started_ms", meta["started_ms"])
            meta["resumed_ms"] = [*stored.get("resumed_ms", []), int(time.time() * 1000)]
        write_json(out_dir / BENCH_JSON, meta)
        results = ResultsLog(out_dir / RESULTS)
        total = len(tasks) * len(spec.policies) * len(spec.seeds)
        courier = courier_for(backend, base_url, llm_flags)
        while True:
            held: list[dict[str, Any]] = []
            jobs = plan_jobs(spec, tasks, settings, out_dir, results.done)
            not_run = _run_with_progress(
                runner, jobs, results, total, workers, console, as_json, budget.may_start, held.append
            )
            say = functools.partial(console.print, markup=False, highlight=False)
            if (
                not held
                or courier is None
                or not courier.deliver(out_dir / "runs", out_dir / "batch.json", say)
            ):
                break
            runner, _ = _make_executor(
                executor, device, workers, task_timeout_s
            )  # `drive` shut the last down
    finally:
        runner.shutdown()
    meta["budget"] = budget.summary(not_run, results.rows)
    done = _finish(out_dir, settings, meta, results.rows, console)
    score = Score.of(results.rows)
    summary = {
        "out": str(out_dir), "runs": score.runs, "new": len(jobs), "skipped": total - len(jobs),
        "statuses": score.statuses, "correct": score.correct, "fast_1": score.fast_1,
        "geomean_eager_x": score.geomean_eager_x, "budget": meta["budget"], "awaiting_reply": len(held),
        **done,
    }  # fmt: skip
    waiting = awaiting_line(held)
    spent = budget.exhausted(not_run, results.rows)
    if as_json:
        if waiting:
            console.print(waiting, highlight=False, soft_wrap=True, markup=False)
        click.echo(json.dumps(summary, indent=2))
        if spent is not None:
            raise spent
        return
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(score.statuses.items()))
    console.print(
        f"bench: {score.runs} runs ({len(jobs)} run now, {total - len(jobs)} from before): {statuses}"
    )
    console.print(f"  {_score_text(score)} over eager -> {out_dir}")
    if done["report"]:
        console.print(f"  report: {done['report']}")
    if waiting:
        console.print(waiting, highlight=False, soft_wrap=True, markup=False)
    if spent is not None:
        raise spent  # one line, exit 1: the budget ran out before every run finished


def _run_with_progress(
    runner: Executor,
    jobs: list[Any],
    results: ResultsLog,
    total: int,
    workers: int,
    console: Console,
    quiet: bool,
    may_start: Any = None,
    on_held: Any = None,
) -> int:
    """Drive the jobs (with a progress bar unless `quiet`: then one line per run on stderr); returns how many
    did not run (see `drive`). Runs stopped awaiting a reply go to `on_held`."""
    if quiet:
        return drive(
            runner, jobs, results, workers, on_row=lambda row: console.print(_row_line(row)),
            may_start=may_start, on_held=on_held,
        )  # fmt: skip
    progress = Progress(
        TextColumn("[bold]bench"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[score]}"),
        console=console,
    )
    with progress:
        bar = progress.add_task(
            "bench", total=total, completed=total - len(jobs), score=_score_text(Score.of(results.rows))
        )

        def on_row(row: dict[str, Any]) -> None:
            progress.console.print(_row_line(row))
            progress.update(bar, advance=1, score=_score_text(Score.of(results.rows)))

        return drive(runner, jobs, results, workers, on_row=on_row, may_start=may_start, on_held=on_held)
