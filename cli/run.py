"""`htam-graph run`: optimise tasks with the HTAM loop (the product's main job)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from htam_graph import memory
from htam_graph.cli.tasksel import resolve_task
from htam_graph.errors import ConfigError
from htam_graph.loop import POLICIES, OptimizationLoop, RunConfig, RunResult, StepOutcome
from htam_graph.model import Device, Language, PrecisionPolicy
from htam_graph.ports import Generator
from htam_graph.settings import Settings


def pick_device(device: str) -> Device:
    """`auto` → cuda when a GPU is visible, else cpu. `cuda` without a GPU is an error (one line)."""
    if device == "cpu":
        return "cpu"
    import torch

    has_cuda = torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        raise ConfigError("--device cuda: no CUDA GPU is visible on this machine (use --device cpu)")
    return "cuda" if has_cuda else "cpu"


def gpu_name(device: Device) -> str:
    """The name the evaluator will report for the GPU ("" on the CPU): the autotune cache's device key."""
    if device != "cuda":
        return ""
    import torch

    return str(torch.cuda.get_device_name(0))


def make_backend(
    spec: str,
    budget_usd: float | None,
    base_url: str | None,
    *,
    precision_policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT,
    autotune_dir: Path | None = None,
    device_name: str = "",
    ledger: Any = None,
) -> tuple[Generator, str, Any]:
    """The generator for `--backend`, its model name, and the executable-locals hook (rules only).

    Rules only: `precision_policy` decides which recipes are executable (the precision track's only under a
    non-strict policy); `autotune_dir` holds the launch-configuration cache (None: remembered in this process
    only, as in benches, whose runs must stay independent); `device_name` is the GPU the cache is keyed by.
    LLM backends only: `ledger` (a `SpendLedger`) makes `budget_usd` a limit shared with every other tracker
    writing to that ledger (a bench's --budget-usd).
    """
    if spec == "rules":
        from htam_graph.rules import RulesGenerator
        from htam_graph.rules.autotune import AutotuneCache, Autotuner

        rules = RulesGenerator(autotuner=Autotuner(AutotuneCache(autotune_dir), device_name))
        return rules, "rules", functools.partial(rules.recipes_for, precision_policy=precision_policy)
    from htam_graph.llm.budget import BudgetTracker
    from htam_graph.llm.registry import make_generator

    generator = make_generator(
        spec, env=os.environ, base_url=base_url, budget=BudgetTracker(budget_usd, ledger)
    )
    return generator, getattr(generator, "model", spec), None


class RunFiles:
    """The `--out` folder: every candidate as it is made, the trajectory after every step, the best at the end."""

    def __init__(
        self, root: Path, task_key: str, multi: bool, prior_steps: list[dict[str, Any]] | None = None
    ) -> None:
        self.dir = root / task_key.replace("/", "__") if multi else root
        (self.dir / "candidates").mkdir(parents=True, exist_ok=True)
        self.steps: list[dict[str, Any]] = list(prior_steps or [])  # a resumed run's steps before its cut

    def step(self, s: StepOutcome) -> None:
        if s.source is not None:
            (self.dir / "candidates" / f"step_{s.step}.py").write_text(s.source, encoding="utf-8")
        self.steps.append(step_row(s))
        _write_json(self.dir / "trajectory.json", self.steps)

    def finish(self, result: RunResult, summary: dict[str, Any]) -> None:
        (self.dir / "best.py").write_text(result.best_source, encoding="utf-8")
        _write_json(self.dir / "summary.json", summary)


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    tmp.replace(path)  # atomic: a crash never leaves a half-written file


def step_row(s: StepOutcome) -> dict[str, Any]:
    r = s.result
    return {
        "step": s.step,
        "global": s.global_key,
        "local": s.local_key,
        "probability": s.direction_probability,
        "status": s.status,
        "error_kind": s.error_kind.value if s.error_kind else None,
        "error_excerpt": s.error_excerpt[:2000],
        "speedup_x": s.speedup_x,
        "best_speedup_x": s.best_speedup_x,
        "gain": s.gain,
        "attempt_key": s.attempt_key,
        "usage": s.usage.model_dump(),
        "eval": r.model_dump(mode="json") if r is not None else None,
    }


def summary_of(result: RunResult, cfg: RunConfig, backend: str, model: str) -> dict[str, Any]:
    best = result.best_result
    env = best or result.first_result
    return {
        "task": result.task_key,
        "run_key": result.run_key,
        "backend": backend,
        "model": model,
        "policy": cfg.policy,
        "steps": cfg.steps,
        "device": cfg.device,
        "shape": cfg.shape,
        "seed": cfg.seed,
        "precision_policy": cfg.precision_policy.value,
        "best_is_reference": result.best_is_reference,
        "best_step": result.best_step,
        "best_speedup_eager_x": result.best_speedup_x if not result.best_is_reference else 1.0,
        "best_speedup_compile_x": result.best_speedup_compile_x,
        "best_runtime_us": best.runtime_us if best else None,
        "ref_eager_us": best.ref_eager_us if best else result.ref_eager_us,
        "ref_compile_us": result.ref_compile_us,
        "sol_us": best.sol_us if best else None,
        "gpu_name": env.gpu_name if env else None,
        "torch_version": env.torch_version if env else None,
        "timing_on_cpu": env.timing_on_cpu if env else None,
        "rtol": env.rtol if env else None,
        "atol": env.atol if env else None,
        "scaled_atol": best.scaled_atol if best else None,
        "compile_failures": sum(1 for s in result.steps if s.result is not None and not s.result.compiled),
        "correct_steps": sum(1 for s in result.steps if s.status != "failed"),
        "usage": result.usage.model_dump(),
        "stopped_reason": result.stopped_reason,
        "confirmation": result.confirmation,
    }


def _progress_line(s: StepOutcome) -> str:
    outcome = {"improved": "[green]improved[/]", "correct": "[yellow]correct[/]", "failed": "[red]failed[/]"}[
        s.status
    ]
    why = f" ({s.error_kind.value})" if s.error_kind else ""
    speed = f" {s.speedup_x:.3f}x" if s.speedup_x else ""
    return (
        f"  step {s.step}: {s.global_key} / {s.local_key or '-'} -> {outcome}{why}{speed}"
        f"   best {s.best_speedup_x:.3f}x"
    )


@click.command("run")
@click.argument("tasks", nargs=-1, required=True)
@click.option(
    "--backend",
    default="rules",
    show_default=True,
    help="rules (offline, no key) | anthropic[:MODEL] | openai[:MODEL] | replay:FILE",
)
@click.option("--policy", "policy_name", type=click.Choice(POLICIES), default="htam", show_default=True)
@click.option("--steps", type=click.IntRange(1, 100), default=6, show_default=True)
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True)
@click.option("--shape", type=click.Choice(["default", "smoke"]), default="default", show_default=True)
@click.option(
    "--language", type=click.Choice([x.value for x in Language]), default="triton", show_default=True
)
@click.option(
    "--precision",
    type=click.Choice([p.value for p in PrecisionPolicy]),
    default="fp32-strict",
    show_default=True,
    help="Non-strict policies are a separate, recorded track.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--timeout", "timeout_s", type=float, default=600.0, show_default=True, help="Per candidate, seconds."
)
@click.option("--budget-usd", type=float, default=None, help="Stop cleanly once LLM spend reaches this.")
@click.option("--base-url", default=None, help="Base URL of an OpenAI-compatible or Anthropic endpoint.")
@click.option("--frozen-memory", is_flag=True, help="Read the memory but write nothing back.")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Folder for best.py, candidates/step_N.py, trajectory.json, summary.json.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summaries as JSON.")
@click.pass_obj
def run(
    settings: Settings,
    tasks: tuple[str, ...],
    backend: str,
    policy_name: str,
    steps: int,
    device: str,
    shape: str,
    language: str,
    precision: str,
    seed: int,
    timeout_s: float,
    budget_usd: float | None,
    base_url: str | None,
    frozen_memory: bool,
    out_dir: str | None,
    as_json: bool,
) -> None:
    """Optimise TASKS (task keys, KernelBench files or your own files in that form) with the HTAM loop.

    Returns the fastest correct kernel, or the reference. On a GPU that kernel first passes 10 more trials on
    fresh seeds (else the next best is tried).
    """
    from htam_graph.kernels_runtime.evaluator import SubprocessEvaluator
    from htam_graph.rules.autotune import default_cache_dir
    from htam_graph.store import store_session

    console = Console(stderr=True, quiet=as_json)
    cfg = RunConfig(
        steps=steps,
        policy=policy_name,
        device=pick_device(device),
        shape=shape,  # type: ignore[arg-type]
        language=Language(language),
        precision_policy=PrecisionPolicy(precision),
        seed=seed,
        timeout_s=timeout_s,
        record=not frozen_memory,
    )
    generator, model, executable = make_backend(
        backend,
        budget_usd,
        base_url,
        precision_policy=cfg.precision_policy,
        autotune_dir=None if frozen_memory else default_cache_dir(settings.htam_home),
        device_name=gpu_name(cfg.device),
    )
    evaluator = SubprocessEvaluator(cache_dir=settings.htam_home / "cache")
    summaries = []
    with store_session(settings) as store:
        memory.ensure_seeded(store)
        memory.repair_pending(store)  # a killed earlier run's half-recorded attempts (no-op otherwise)
        resolved = [resolve_task(store, t) for t in tasks]
        for task in resolved:
            files = RunFiles(Path(out_dir), task.key, len(resolved) > 1) if out_dir else None
            console.print(
                f"[bold]{task.key}[/] ({', '.join(task.op_tags)}) — {cfg.policy}, {backend}, "
                f"{cfg.steps} steps on {cfg.device}"
            )

            def on_step(s: StepOutcome, files: RunFiles | None = files) -> None:
                console.print(_progress_line(s))
                if files:
                    files.step(s)

            loop = OptimizationLoop(
                store,
                evaluator,
                generator,
                settings.policy,
                cfg,
                executable_locals=executable,
                on_step=on_step,
                model_name=model,
            )
            with console.status("optimising…"):
                result = loop.run(task)
            summary = summary_of(result, cfg, backend, model)
            summaries.append(summary)
            if files:
                files.finish(result, summary)
            if result.best_is_reference:
                best = "the reference (nothing correct was faster)"
            elif summary["timing_on_cpu"]:
                best = f"step {result.best_step}, a correct kernel (CPU timings are not speed claims)"
            else:
                best = f"step {result.best_step}, {summary['best_speedup_eager_x']:.3f}x over eager"
            console.print(f"  best: {best}; {result.stopped_reason}")
            if result.confirmation:
                console.print(f"  confirmation: {result.confirmation}")
            if result.backend_error is not None:
                raise result.backend_error  # after the files are written: one line, exit 1
    if as_json:
        click.echo(json.dumps(summaries if len(summaries) > 1 else summaries[0], indent=2, default=str))
