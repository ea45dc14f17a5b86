"""`htam-graph run`: optimise tasks with the HTAM loop (the product's main job)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from htam_graph import memory
from htam_graph.bench.runfiles import RunFiles, resume_run, run_config_record, summary_of
from htam_graph.cli.backends import BACKEND_HELP, llm_options
from htam_graph.cli.progress import StepProgress
from htam_graph.cli.replies import awaiting_line, courier_for
from htam_graph.cli.tasksel import resolve_task
from htam_graph.errors import BackendError, ConfigError
from htam_graph.generators import LLMFlags, make_backend, run_generator
from htam_graph.loop import OptimizationLoop, PolicyName, RunConfig, RunResult
from htam_graph.model import Device, Language, PrecisionPolicy, Task
from htam_graph.ports import Evaluator, Generator, GraphStore
from htam_graph.settings import Settings

__all__ = ["gpu_name", "pick_device", "run"]


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


@dataclass
class _Runs:
    """What every task's run of one `htam-graph run` shares."""

    store: GraphStore
    evaluator: Evaluator
    generator: Generator
    executable: Any
    settings: Settings
    cfg: RunConfig
    backend: str
    model: str
    flags: LLMFlags
    out_dir: Path | None
    multi: bool
    console: Console
    progress: list[StepProgress] = field(default_factory=list)  # the one showing now (retries go there)

    def retry(self, message: str) -> None:
        """Show a backend retry in the progress of the run it happened in."""
        if self.progress:
            self.progress[-1].retry(message)
        else:
            self.console.print(f"  [yellow]retry[/]: {escape(message)}", highlight=False)

    def run_task(self, task: Task) -> dict[str, Any]:
        """One task's run, resumed when its folder holds an unfinished one; returns its summary."""
        cfg, console = self.cfg, self.console
        files = RunFiles(self.out_dir, task.key, self.multi) if self.out_dir else None
        config = run_config_record(cfg, self.backend)
        resumed = resume_run(files, cfg.steps, config) if files else None
        resume, prior = resumed if resumed else (None, [])
        console.print(
            f"[bold]{task.key}[/] ({', '.join(task.op_tags)}) — {cfg.policy}, {escape(self.backend)}, "
            f"{cfg.steps} steps on {cfg.device}" + _resumed_note(resume)
        )
        if files:
            files.steps = list(prior)
            files.start(config)
        generator = run_generator(self.generator, files.dir if files else None, self.flags)
        with StepProgress(console) as progress:
            self.progress.append(progress)

            def on_step(s: Any) -> None:
                progress.step(s)
                if files:
                    files.step(s)

            loop = OptimizationLoop(
                self.store, self.evaluator, generator, self.settings.policy, cfg,
                executable_locals=self.executable, on_step=on_step, model_name=self.model,
                on_phase=progress.phase,
            )  # fmt: skip
            try:
                result = loop.run(task, resume=resume)
            finally:
                self.progress.pop()
        summary = summary_of(result, cfg, self.backend, self.model)
        if result.pending is not None:
            if files is None:
                raise BackendError(
                    f"{self.generator.name} has no reply for step {result.pending.step} of {task.key}: "
                    "with --out DIR the request is written there, to be answered and resumed"
                )
            summary["awaiting_reply"] = str(files.await_reply(result, result.pending, config))
        if files:
            files.finish(result, summary)
        self._report(result, summary)
        return summary

    def _report(self, result: RunResult, summary: dict[str, Any]) -> None:
        if result.pending is not None:
            self.console.print(f"  awaiting the reply to step {result.pending.step}")
            return
        if result.best_is_reference:
            best = "the reference (nothing correct was faster)"
        elif summary["timing_on_cpu"]:
            best = f"step {result.best_step}, a correct kernel (CPU timings are not speed claims)"
        else:
            best = f"step {result.best_step}, {summary['best_speedup_eager_x']:.3f}x over eager"
        self.console.print(f"  best: {best}; {escape(result.stopped_reason)}")
        if result.confirmation:
            self.console.print(f"  confirmation: {escape(result.confirmation)}")
        if result.backend_error is not None:
            raise result.backend_error  # after the files are written: one line, exit 1


def _resumed_note(resume: Any) -> str:
    if resume is None:
        return ""
    if resume.pending is not None:
        return f", resumed at step {resume.pending.step} (the step awaiting its reply)"
    return f", resumed after step {len(resume.steps)}"


@click.command("run")
@click.argument("tasks", nargs=-1, required=True)
@click.option("--backend", default="rules", show_default=True, help=BACKEND_HELP)
@click.option(
    "--policy",
    "policy_name",
    type=click.Choice([p.value for p in PolicyName]),
    default="htam",
    show_default=True,
)
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
    help="Folder for best.py, candidates/step_N.py (+ .reply.md), trajectory.json, summary.json, pending/. "
    "An unfinished run there (awaiting a reply, or cut) is resumed by the same command.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the summaries as JSON (progress stays on stderr)."
)
@llm_options
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
    llm_flags: LLMFlags,
) -> None:
    """Optimise TASKS (task keys, KernelBench files or your own files in that form) with the HTAM loop.

    Returns the fastest correct kernel, or the reference. On a GPU that kernel first passes 10 more trials on
    fresh seeds (else the next best is tried).

    \b
    Backends (--backend):
      rules                 offline recipes, no model
      anthropic[:MODEL]     Anthropic API (ANTHROPIC_API_KEY)
      openai:MODEL          any OpenAI-compatible server (OPENAI_API_KEY, --base-url)
      llm:MODEL             any model of the `llm` library and its plugins (its keys and aliases)
      command:"CMD ..."     a program: the request on its stdin (text, or JSON with --command-json),
                            the reply on its stdout; a failure or --llm-timeout fails that step only
      files                 each request is written to OUT/pending/step_N.request.md; save the answer
                            as step_N.reply.md and run the same command again to continue at that step
      batch:anthropic[:M]   awaited requests sent as one Message Batches job (half price), polled
      batch:openai:MODEL    the same through the OpenAI Batch API
      replay:FILE           recorded replies (--record FILE writes such a file from any backend); each
                            step takes the direction and strategy the recorded run took there
    """
    from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
    from htam_graph.rules.autotune import default_cache_dir
    from htam_graph.store import store_session

    deferred = backend == "files" or backend.startswith("batch:")
    if deferred and out_dir is None:
        raise ConfigError(f"--backend {backend} writes each request to answer later: give --out DIR")
    console = Console(stderr=True, soft_wrap=True)  # lines whole in logs; stdout keeps the JSON
    cfg = RunConfig(
        steps=steps,
        policy=PolicyName(policy_name),
        device=pick_device(device),
        shape=shape,  # type: ignore[arg-type]
        language=Language(language),
        precision_policy=PrecisionPolicy(precision),
        seed=seed,
        timeout_s=timeout_s,
        record=not frozen_memory,
    )
    relay: list[_Runs] = []
    generator, model, executable = make_backend(
        backend,
        budget_usd,
        base_url,
        precision_policy=cfg.precision_policy,
        autotune_dir=None if frozen_memory else default_cache_dir(settings.htam_home),
        device_name=gpu_name(cfg.device),
        flags=llm_flags,
        notify=lambda message: relay[0].retry(message) if relay else None,
    )
    courier = courier_for(backend, base_url, llm_flags)
    evaluator = SubprocessEvaluator(cache_dir=settings.htam_home / "cache")
    with store_session(settings) as store:
        memory.ensure_seeded(store)
        memory.repair_pending(store)  # a killed earlier run's half-recorded attempts (no-op otherwise)
        resolved = [resolve_task(store, t) for t in tasks]
        runs = _Runs(
            store, evaluator, generator, executable, settings, cfg, backend, model, llm_flags,
            Path(out_dir) if out_dir else None, len(resolved) > 1, console,
        )  # fmt: skip
        relay.append(runs)
        summaries = {task.key: runs.run_task(task) for task in resolved}
        while courier is not None and out_dir is not None:
            if not any(s.get("awaiting_reply") for s in summaries.values()):
                break
            say = functools.partial(console.print, markup=False, highlight=False)
            if not courier.deliver(Path(out_dir), Path(out_dir) / "batch.json", say):
                break  # the batch is still running: the same command collects it later
            for task in resolved:
                if summaries[task.key].get("awaiting_reply"):
                    summaries[task.key] = runs.run_task(task)
    done = [summaries[t.key] for t in resolved]
    line = awaiting_line(done)
    if line:
        console.print(escape(line), highlight=False, soft_wrap=True)
    if as_json:
        click.echo(json.dumps(done if len(done) > 1 else done[0], indent=2, default=str))
