"""`htam-graph baseline TASK...`: measure eager and torch.compile reference times and store them in the graph.

The protocol is the candidates' (same worker, interleaved CUDA events, L2 flushed). On a machine without CUDA
the command refuses unless `--device cpu` is given; CPU values are then stored flagged `timing_on_cpu`.
"""

from __future__ import annotations

import json

import click

from htam_graph.cli.eval import resolve_device, resolve_task
from htam_graph.errors import ConfigError, RuntimeEvalError
from htam_graph.settings import Settings


@click.command("baseline")
@click.argument("tasks", nargs=-1, required=True)
@click.option(
    "--device", type=click.Choice(["cpu", "cuda"]), default=None, help="Default: cuda; cpu must be explicit."
)
@click.option("--shape", type=click.Choice(["default", "smoke"]), default="default", show_default=True)
@click.option("--timing-runs", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--skip-compile", is_flag=True, help="Do not time torch.compile of the reference.")
@click.option("--no-store", is_flag=True, help="Measure and print only; write nothing to the graph.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.pass_obj
def baseline(
    settings: Settings, tasks: tuple[str, ...], device: str | None, shape: str, timing_runs: int,
    skip_compile: bool, no_store: bool, as_json: bool,
) -> None:  # fmt: skip
    """Measure reference baselines of TASK files or keys (eager, torch.compile) and store them as
    (:Baseline)."""
    from htam_graph.kernels_runtime.parent.baseline import baseline_request, baseline_row
    from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator

    if device is None:
        device = resolve_device(None)
        if device != "cuda":
            raise ConfigError(
                "no CUDA device: baselines are GPU measurements "
                "(pass --device cpu to store flagged CPU values)"
            )
    device = resolve_device(device)
    requests = []
    for ref in tasks:
        key, source = resolve_task(settings, ref)
        requests.append(baseline_request(key, source, device, shape, timing_runs, not skip_compile))  # type: ignore[arg-type,unused-ignore]
    evaluator = SubprocessEvaluator(cache_dir=settings.htam_home / "runtime-cache")
    results = evaluator.evaluate_many(requests, reuse_worker=True)
    rows, failures = [], []
    for req, res in zip(requests, results, strict=True):
        try:
            rows.append(baseline_row(req, res))
        except ValueError as e:
            failures.append(str(e))
    if rows and not no_store:
        from htam_graph.store import store_session

        with store_session(settings) as store:
            store.run("baseline_upsert", {"rows": rows})
    if as_json:
        click.echo(
            json.dumps({"rows": rows, "failures": failures, "stored": bool(rows) and not no_store}, indent=2)
        )
    else:
        for row in rows:
            p = row["props"]
            comp = "-" if p["compile_us"] is None else f"{p['compile_us']:,.1f} µs"
            flag = (
                " (CPU timing)" if p["timing_on_cpu"] else f" ({p['timing_method'].replace('_', '-')} timing)"
            )
            click.echo(
                f"{row['task_key']}: eager {p['eager_us']:,.1f} µs, torch.compile {comp} "
                f"on {p['gpu_name'] or p['gpu_arch']}{flag}"
            )
        for f in failures:
            click.echo(f"failed: {f}", err=True)
    if failures and not rows:
        raise RuntimeEvalError(f"no baseline could be measured ({len(failures)} failures)")
