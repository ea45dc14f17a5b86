"""`htam-graph eval CANDIDATE.py --task KEY_OR_FILE`: check and time one candidate in a fresh worker process.

Exit codes: 0 the candidate is correct; 3 it was evaluated and is not correct (the verdict is printed, e.g.
mismatch, hack_detected, compile_error, timeout); 1 bad input or an infrastructure failure (infra_error);
2 usage errors (click).
"""

from __future__ import annotations

from pathlib import Path

import click

from htam_graph.errors import ConfigError, TaskError
from htam_graph.model import ErrorKind, EvalRequest, EvalResult, PrecisionPolicy
from htam_graph.settings import Settings

EXIT_INCORRECT = 3


def resolve_task(settings: Settings, key_or_file: str) -> tuple[str, str]:
    """(task key, task source): a readable file path is used as is (no graph needed); anything else is a task
    key looked up in the graph."""
    path = Path(key_or_file)
    if path.is_file():
        from htam_graph.importers.kernelbench import parse_task

        parsed = parse_task(path)
        key = getattr(parsed, "key", None) or path.stem
        try:
            return key, path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise TaskError(f"cannot read task file {path}: {e}") from e
    if key_or_file.endswith(".py"):
        raise TaskError(f"task file not found: {key_or_file}")
    from htam_graph.importers.tasks_store import get_task
    from htam_graph.store import store_session

    with store_session(settings) as store:
        task = get_task(store, key_or_file)
    return task.key, task.source


def resolve_device(device: str | None) -> str:
    """`cpu`/`cuda`, or the best available when None; `cuda` without CUDA is a one-line error."""
    import torch

    has_cuda = bool(torch.cuda.is_available())
    if device is None:
        return "cuda" if has_cuda else "cpu"
    if device == "cuda" and not has_cuda:
        raise ConfigError("--device cuda: no CUDA device is available on this machine (use --device cpu)")
    return device


def _fmt_us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} µs"


def _fmt_x(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}×"


def render(result: EvalResult, candidate: str, task_key: str) -> None:
    """One screen: verdict, checks, error, timings, speedups, and what the numbers were measured on."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if result.correct:
        verdict = "[bold green]CORRECT[/]"
    else:
        verdict = f"[bold red]{(result.error_kind or ErrorKind.INFRA_ERROR).value.upper()}[/]"
    lang = result.language.value if result.language else "no kernel language"
    console.print(f"{verdict}  {candidate} vs {task_key}  ({lang}, shape {result.shape_variant})")
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("check")
    table.add_column("status")
    for name, status in result.checks.items():
        colour = "green" if status.startswith("pass") else "red" if status.startswith("fail") else "dim"
        table.add_row(name, f"[{colour}]{status[:150]}[/]")
    console.print(table)
    if result.error_excerpt:
        console.print("[bold]error[/]")
        console.print(result.error_excerpt, markup=False, highlight=False)
    if result.task_degenerate:
        console.print("[yellow]task degenerate: a win on it is not counted[/]")
    if result.scaled_atol is not None:
        console.print(
            f"tiny output: compared at atol scaled to the output (at most {result.scaled_atol:.3g})"
        )
    if result.runtime_us is not None:
        where = (
            "CPU perf_counter (not a GPU claim)"
            if result.timing_on_cpu
            else f"CUDA events, L2 flushed, {result.timing_method.replace('_', '-') or 'protocol unknown'}"
        )
        console.print(
            f"candidate {_fmt_us(result.runtime_us)} (IQR {_fmt_us(result.runtime_spread_us)}), "
            f"eager {_fmt_us(result.ref_eager_us)}, torch.compile {_fmt_us(result.ref_compile_us)}  [{where}]"
        )
        console.print(
            f"speedup vs eager {_fmt_x(result.speedup_eager_x)}, "
            f"vs torch.compile {_fmt_x(result.speedup_compile_x)}"
            + (f"; speed-of-light floor {_fmt_us(result.sol_us)}" if result.sol_us else "")
            + (" [red](flagged)[/]" if result.sol_flagged else "")
        )
    if result.max_abs_err is not None:
        console.print(f"max abs err {result.max_abs_err:.3g}, max rel err {result.max_rel_err or 0:.3g}")
    gpu = f"{result.gpu_name} ({result.gpu_arch})" if result.gpu_name else result.gpu_arch or result.device
    console.print(
        f"[dim]{gpu}, torch {result.torch_version}, policy {result.precision_policy.value}, "
        f"rtol {result.rtol:g} atol {result.atol:g}, compile {result.compile_s or 0:.2f} s, "
        f"wall {result.wall_s or 0:.1f} s[/]"
    )


@click.command("eval")
@click.argument("candidate", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--task", "task_ref", required=True, help="Task file path, or a task key imported in the graph."
)
@click.option(
    "--device",
    type=click.Choice(["cpu", "cuda"]),
    default=None,
    help="Default: cuda when available, else cpu.",
)
@click.option("--shape", type=click.Choice(["default", "smoke"]), default="default", show_default=True)
@click.option(
    "--trials", type=click.IntRange(min=1), default=5, show_default=True, help="Correctness trials (seeds)."
)
@click.option("--extra-shapes", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--timing-runs", type=click.IntRange(min=1), default=20, show_default=True)
@click.option(
    "--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True
)
@click.option(
    "--policy",
    type=click.Choice([p.value for p in PrecisionPolicy]),
    default=PrecisionPolicy.FP32_STRICT.value,
    show_default=True,
)
@click.option(
    "--reference", "reference_track", is_flag=True, help="Trusted reference track: no kernel required."
)
@click.option("--no-baselines", is_flag=True, help="Skip timing torch.compile of the reference.")
@click.option("--json", "as_json", is_flag=True, help="Print the EvalResult as JSON.")
@click.pass_obj
def eval_cmd(
    settings: Settings, candidate: Path, task_ref: str, device: str | None, shape: str, trials: int,
    extra_shapes: int, timing_runs: int, timeout_s: float, policy: str, reference_track: bool,
    no_baselines: bool, as_json: bool,
) -> None:  # fmt: skip
    """Check CANDIDATE.py (a ModelNew) against a task's reference and time it. Exit 0 correct, 3 incorrect."""
    from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator

    try:
        candidate_source = candidate.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read {candidate}: {e}") from e
    task_key, task_source = resolve_task(settings, task_ref)
    request = EvalRequest(
        task_key=task_key, task_source=task_source, candidate_source=candidate_source,
        device=resolve_device(device), shape=shape, precision_policy=PrecisionPolicy(policy), trials=trials,  # type: ignore[arg-type]
        extra_shapes=extra_shapes, timing_runs=timing_runs, timeout_s=timeout_s,
        measure_baselines=not no_baselines, candidate_kind="reference" if reference_track else "kernel",
    )  # fmt: skip
    result = SubprocessEvaluator(cache_dir=settings.htam_home / "runtime-cache").evaluate(request)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    else:
        render(result, candidate.name, task_key)
    if result.correct:
        return
    if result.error_kind is ErrorKind.INFRA_ERROR:
        raise click.exceptions.Exit(1)
    raise click.exceptions.Exit(EXIT_INCORRECT)
