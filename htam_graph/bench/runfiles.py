"""The folder of one run (`run --out`, a bench's `runs/<task>/<policy>/seed_<n>/`), written as the run goes.

- `candidates/step_N.py`: each candidate; `candidates/step_N.reply.md`: the model's raw reply beside it, and
  `candidates/step_N.request.md` the request it answered when it came through `pending/` (the whole exchange);
- `trajectory.json`: one row per step, rewritten after every step (what a cut run resumes from);
- `pending/`: the request of a step awaiting its reply (`htam_graph.llm.pending`);
- `run.json` (`run` only): the configuration, so that `run --out` resumes only a run of the same one;
- `best.py` and `summary.json` at the end.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from htam_graph.errors import ConfigError
from htam_graph.runtypes import PendingStep, RunConfig, RunResult, StepOutcome

__all__ = ["RunFiles", "resume_run", "run_config_record", "step_row", "summary_of"]

AWAITING = "awaiting_reply"


class RunFiles:
    """The `--out` folder: every candidate as it is made, the trajectory after every step, the best at the
    end."""

    def __init__(
        self, root: Path, task_key: str, multi: bool, prior_steps: list[dict[str, Any]] | None = None
    ) -> None:
        self.dir = root / task_key.replace("/", "__") if multi else root
        (self.dir / "candidates").mkdir(parents=True, exist_ok=True)
        self.steps: list[dict[str, Any]] = list(prior_steps or [])  # a resumed run's steps before its cut

    @property
    def pending_dir(self) -> Path:
        from htam_graph.llm.pending import PENDING_DIR

        return self.dir / PENDING_DIR

    def step(self, s: StepOutcome) -> None:
        """Write step `s`: its candidate, its raw reply (and request), its trajectory row; its pending files
        are done."""
        if s.source is not None:
            (self.dir / "candidates" / f"step_{s.step}.py").write_text(s.source, encoding="utf-8")
        if s.generation is not None and s.generation.raw_text:
            reply = self.dir / "candidates" / f"step_{s.step}.reply.md"
            reply.write_text(s.generation.raw_text, encoding="utf-8")
        self.steps.append(step_row(s))
        _write_json(self.dir / "trajectory.json", self.steps)
        from htam_graph.llm.pending import clear_step

        request = self.pending_dir / f"step_{s.step}.request.md"
        if request.is_file():  # kept beside the reply: what the model was asked is part of the record
            request.replace(self.dir / "candidates" / request.name)
        clear_step(self.pending_dir, s.step)

    def await_reply(self, result: RunResult, pending: PendingStep, config: dict[str, Any]) -> Path:
        """Write the pending request of a run that stopped awaiting its reply; returns where the reply
        goes."""
        from htam_graph.llm.pending import write_pending

        _write_json(self.dir / "trajectory.json", self.steps)  # also when no step was made yet
        return write_pending(
            self.pending_dir, pending, run_key=result.run_key, task_key=result.task_key, config=config
        )

    def start(self, config: dict[str, Any]) -> None:
        """Record the run's configuration (`run --out`), checked when the run is resumed."""
        _write_json(self.dir / "run.json", config)

    def finish(self, result: RunResult, summary: dict[str, Any]) -> None:
        """Write the summary, and the best kernel once the run is finished (not while a reply is awaited)."""
        if result.pending is None:
            (self.dir / "best.py").write_text(result.best_source, encoding="utf-8")
        _write_json(self.dir / "summary.json", summary)


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    tmp.replace(path)  # atomic: a crash never leaves a half-written file


def step_row(s: StepOutcome) -> dict[str, Any]:
    """The trajectory row of step `s` (the raw reply is kept beside the candidate, not here)."""
    r = s.result
    generation = None
    if s.generation is not None:
        generation = asdict(s.generation)
        generation.pop("raw_text")
        generation["offered"] = list(s.generation.offered)
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
        "generation": generation,
        "eval": r.model_dump(mode="json") if r is not None else None,
    }


def run_config_record(cfg: RunConfig, backend: str) -> dict[str, Any]:
    """What must match for `run --out` to resume a run in that folder."""
    return {
        "backend": backend,
        "policy": cfg.policy,
        "steps": cfg.steps,
        "device": cfg.device,
        "shape": cfg.shape,
        "language": cfg.language.value,
        "precision_policy": cfg.precision_policy.value,
        "seed": cfg.seed,
        "record": cfg.record,
    }


def resume_run(files: RunFiles, steps: int, config: dict[str, Any]) -> Any:
    """`(Resume, prior rows)` for a run in `files.dir` that stopped awaiting a reply or was cut, else None.

    A finished run (its summary says so) is not resumed: the folder is written anew. A run of another
    configuration is refused (`ConfigError`, one line) rather than mixed."""
    from htam_graph.bench.resume import load_resume

    summary = files.dir / "summary.json"
    if summary.is_file():
        try:
            stopped = json.loads(summary.read_text(encoding="utf-8")).get("stopped_reason")
        except (OSError, ValueError):
            stopped = None
        if stopped != AWAITING:
            return None
    resumed = load_resume(files.dir, steps)
    if resumed is None:
        return None
    stored = _stored_config(files.dir)
    if stored is not None and stored != config:
        diffs = [f"{k}: {stored.get(k)!r} there, {v!r} now" for k, v in config.items() if stored.get(k) != v]
        raise ConfigError(
            f"{files.dir} holds an unfinished run of another configuration ({'; '.join(diffs[:3])}): "
            "run the same command to resume it, or use another --out folder"
        )
    return resumed


def _stored_config(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def summary_of(result: RunResult, cfg: RunConfig, backend: str, model: str) -> dict[str, Any]:
    """The run's `summary.json` (also what `run --json` prints and a bench row starts from)."""
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
        "awaiting_step": result.pending.step if result.pending else None,
    }
