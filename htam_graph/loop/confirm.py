"""Confirmation of the kernel a run returns: a second, independent evaluation on fresh seeds.

Five trials can let a kernel at the edge of the tolerance through by luck (a kernel that passes one
evaluation in five at 1e-4). Before a run returns a kernel it is evaluated again with `confirm_trials` trials
on seeds no step used; if it fails, the next fastest correct step is tried (up to 3 kernels), else the run
returns the reference. `RunResult.confirmation` says what happened; each failed confirmation is recorded as a
failed attempt (`confirmation_attempt`: negative evidence for the strategy).
"""

from __future__ import annotations

import hashlib

from htam_graph import memory
from htam_graph.model import AttemptRecord, ErrorKind, EvalResult, Task
from htam_graph.ports import Evaluator
from htam_graph.runtypes import RunConfig, RunResult, StepOutcome

__all__ = ["CONFIRM_SEED_OFFSET", "confirm_best", "confirmation_attempt"]

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


def confirmation_attempt(
    run_key: str, task: Task, cfg: RunConfig, n: int, confirmed: StepOutcome, check: EvalResult
) -> AttemptRecord:
    """A failed confirmation as an attempt of the same strategy on the same kernel: negative evidence that
    balances the positive evidence its step earned. Numbered after the run's steps; it opens no transition
    (it re-checks a kernel, it is not a move between directions) and FOLLOWS the attempt it re-checked."""
    source = confirmed.source or ""
    return AttemptRecord(
        key=f"{run_key}-c{n}",
        run_key=run_key,
        task_key=task.key,
        step=cfg.steps + n,
        global_key=confirmed.global_key,
        local_key=confirmed.local_key,
        prev_global_key=None,
        prev_attempt_key=confirmed.attempt_key,
        status="failed",
        error_kind=check.error_kind or ErrorKind.MISMATCH,
        compiled=check.compiled,
        correct=False,
        speedup_x=None,
        gain=0.0,
        runtime_us=None,
        gpu_name=check.gpu_name,
        gpu_arch=check.gpu_arch,
        precision_policy=cfg.precision_policy,
        kernel_language=check.language,
        kernel_source=source,
        kernel_sha256=hashlib.sha256(source.encode()).hexdigest(),
        created_ms=memory.now_ms(),
    )
