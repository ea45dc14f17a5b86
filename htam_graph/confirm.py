"""Confirmation of the kernel a run returns: a second, independent evaluation on fresh seeds.

Five trials can let a kernel at the edge of the tolerance through by luck (H200: level2/18's
reduce-before-linear kernel passed 1 of its 5 evaluations at 1e-4). Before a run returns a kernel it is
evaluated again with `confirm_trials` trials on seeds no step used; if it fails, the next fastest correct step
is tried (up to 3 kernels), else the run returns the reference. `RunResult.confirmation` says what happened;
the loop records each failed confirmation as a failed attempt (negative evidence for the strategy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from htam_graph.model import EvalResult, Task
from htam_graph.ports import Evaluator

if TYPE_CHECKING:
    from htam_graph.runtypes import RunConfig, RunResult, StepOutcome

__all__ = ["CONFIRM_SEED_OFFSET", "confirm_best"]

CONFIRM_SEED_OFFSET = 10_000  # steps use seed + step (step <= a few hundred): confirmation seeds are disjoint


def confirm_best(
    evaluator: Evaluator, cfg: RunConfig, task: Task, result: RunResult, reference: str
) -> list[tuple[StepOutcome, EvalResult]]:
    """Re-check the kernel to be returned on fresh seeds; drop it (and try the next best) if it fails.

    `reference` is the task's reference as a `ModelNew` source, returned when no kernel survives. Returns the
    failed confirmations (the step and the confirming evaluation), which the loop records as failed attempts:
    they are evidence against the strategy that produced the kernel."""
    trials = cfg.confirm_trials if cfg.confirm_trials is not None else (10 if cfg.device == "cuda" else 0)
    failures: list[tuple[StepOutcome, EvalResult]] = []
    if trials <= 0 or result.best_is_reference:
        return failures
    # the returned kernel first, then the other correct steps faster than the reference, fastest first
    best = [s for s in result.steps if s.step == result.best_step]
    others = sorted(
        (
            s
            for s in result.steps
            if s.step != result.best_step and s.source and s.result and s.result.correct
            and (s.speedup_x or 0.0) > 1.0
        ),
        key=lambda s: -(s.speedup_x or 0.0),
    )  # fmt: skip
    notes: list[str] = []
    tried: set[str] = set()
    for s in best + others:
        if s.source is None or s.source in tried:
            continue
        tried.add(s.source)
        check = evaluator.evaluate(
            cfg.eval_request(
                task, s.source, seed=cfg.seed + CONFIRM_SEED_OFFSET, trials=trials, measure_baselines=False
            )
        )
        if check.correct:
            if s.step != result.best_step:
                result.best_source, result.best_step, result.best_result = s.source, s.step, s.result
                result.best_speedup_x = s.speedup_x or 1.0
            notes.append(f"step {s.step} confirmed: {trials} more trials on fresh seeds passed")
            result.confirmation = "; ".join(notes)
            return failures
        why = check.error_excerpt.splitlines()[0][:160] if check.error_excerpt else ""
        kind = check.error_kind.value if check.error_kind else "not correct"
        notes.append(f"step {s.step} failed its confirmation ({kind}: {why})")
        failures.append((s, check))
        if len(tried) >= 3:
            break
    result.best_source, result.best_is_reference = reference, True
    result.best_step, result.best_result, result.best_speedup_x = None, None, 1.0
    result.confirmation = "; ".join(notes + ["the reference is returned"])
    return failures
