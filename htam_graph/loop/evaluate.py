"""One step's evaluation and update: the candidate is checked and timed (`Evaluator` port), adopted as the
run's best when it improved on it, and its attempt written to the memory.

An incorrect kernel is never adopted. Wins on degenerate tasks, or timed on the CPU (interpreted Triton),
teach nothing about GPU speed: such attempts are recorded with gain 0 and never count as positive
evidence."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Literal

from htam_graph import memory
from htam_graph.loop.context import Choice, RunContext, RunState
from htam_graph.model import AttemptRecord, Device, ErrorKind, EvalResult, GenerationReply
from htam_graph.runtypes import GenerationRecord, RunResult, StepOutcome

__all__ = ["adopt", "evaluate_and_record", "note_references", "replay"]

Status = Literal["improved", "correct", "failed"]


@dataclass(frozen=True)
class _Verdict:
    """What a step's candidate came to (an evaluation's, or the generator's failure)."""

    error_kind: ErrorKind | None
    excerpt: str
    correct: bool
    compiled: bool
    speedup: float | None
    evaluation: EvalResult | None


def evaluate_and_record(
    ctx: RunContext, state: RunState, step: int, choice: Choice, reply: GenerationReply
) -> StepOutcome:
    """Evaluate step `step`'s reply, adopt it when it improved on the best, and record its attempt."""
    verdict = _evaluate(ctx, state, step, reply)
    result, evaluation = state.result, verdict.evaluation
    before = result.best_speedup_x
    timed = evaluation is not None and not evaluation.task_degenerate and not evaluation.timing_on_cpu
    speedup = verdict.speedup
    gain = math.log(speedup / before) if verdict.correct and timed and speedup and speedup > 0 else 0.0
    status: Status
    if verdict.correct and gain > 0:
        status = "improved"
    elif verdict.correct:
        status = "correct"
    else:
        status = "failed"
    adopt(result, step, status, reply.source, evaluation, speedup)
    record = _attempt_record(ctx, state, step, choice, reply, verdict, status, gain)
    if ctx.config.record:
        state.record(record)
    return StepOutcome(
        step=step,
        global_key=choice.direction.key,
        local_key=record.local_key,
        direction_probability=choice.direction.probability,
        status=status,
        error_kind=verdict.error_kind,
        error_excerpt=verdict.excerpt,
        speedup_x=speedup,
        best_speedup_x=result.best_speedup_x,
        gain=gain,
        source=reply.source,
        result=evaluation,
        usage=reply.usage,
        attempt_key=record.key,
        generation=_generation_record(choice, reply),
    )


def _evaluate(ctx: RunContext, state: RunState, step: int, reply: GenerationReply) -> _Verdict:
    if reply.infra_error:  # the backend failed, not the model: recorded, but no evidence (memory.is_evidence)
        excerpt = reply.error or "the generator failed"
        return _Verdict(ErrorKind.INFRA_ERROR, excerpt, False, False, None, None)
    if reply.source is None:
        excerpt = reply.error or "the generator returned no code"
        return _Verdict(ErrorKind.NO_CODE, excerpt, False, False, None, None)
    ctx.phase(step, "evaluating")
    result = state.result
    evaluation = ctx.evaluator.evaluate(
        ctx.config.eval_request(
            state.task,
            reply.source,
            seed=ctx.config.seed + step,
            trials=ctx.config.trials,
            # torch.compile of the reference costs seconds: it is measured once per run, at the first
            # timed step.
            measure_baselines=result.ref_compile_us is None,
        )
    )
    note_references(result, evaluation)
    return _Verdict(
        evaluation.error_kind,
        evaluation.error_excerpt,
        evaluation.correct,
        evaluation.compiled,
        evaluation.speedup_eager_x,
        evaluation,
    )


def _attempt_record(
    ctx: RunContext,
    state: RunState,
    step: int,
    choice: Choice,
    reply: GenerationReply,
    verdict: _Verdict,
    status: Status,
    gain: float,
) -> AttemptRecord:
    cfg, evaluation = ctx.config, verdict.evaluation
    source_hash = hashlib.sha256(reply.source.encode()).hexdigest() if reply.source else None
    # Where it ran, as the evaluation says (an attempt without one ran nowhere: the run's device).
    device: Device = cfg.device
    if evaluation is not None:
        device = "cpu" if evaluation.timing_on_cpu else evaluation.device
    return AttemptRecord(
        key=f"{state.run_key}-s{step}",
        run_key=state.run_key,
        task_key=state.task.key,
        step=step,
        global_key=choice.direction.key,
        local_key=choice.local.strategy.key if choice.local else None,
        prev_global_key=state.history[-1] if state.history else None,
        prev_attempt_key=state.prev_attempt,
        status=status,
        error_kind=verdict.error_kind,
        compiled=verdict.compiled,
        correct=verdict.correct,
        speedup_x=verdict.speedup,
        gain=gain,
        runtime_us=evaluation.runtime_us if evaluation else None,
        gpu_name=evaluation.gpu_name if evaluation else "",
        gpu_arch=(evaluation.gpu_arch if evaluation else "")
        or (memory.CPU_ARCH if device == "cpu" else state.gpu_arch),
        precision_policy=cfg.precision_policy,
        kernel_language=evaluation.language if evaluation else None,
        kernel_source=reply.source,
        kernel_sha256=source_hash,
        created_ms=memory.now_ms(),
        device=device,
    )


def _generation_record(choice: Choice, reply: GenerationReply) -> GenerationRecord:
    return GenerationRecord(
        offered=choice.offered,
        named=reply.strategy_key,
        chosen=choice.chosen,
        extraction=reply.extraction,
        finish_reason=reply.finish_reason,
        truncated=reply.truncated,
        latency_s=reply.latency_s,
        attempts=reply.attempts,
        model=reply.model,
        infra_error=reply.infra_error,
        raw_text=reply.raw_text,
    )


def note_references(result: RunResult, evaluation: EvalResult) -> None:
    """Keep where the run was first measured and the first reference timings it got."""
    result.first_result = result.first_result or evaluation
    if result.ref_compile_us is None and evaluation.ref_compile_us:
        result.ref_compile_us = evaluation.ref_compile_us
    if result.ref_eager_us is None and evaluation.ref_eager_us:
        result.ref_eager_us = evaluation.ref_eager_us


def adopt(
    result: RunResult,
    step: int,
    status: str,
    source: str | None,
    evaluation: EvalResult | None,
    speedup: float | None,
) -> None:
    """Make step `step`'s candidate the run's best when it improved on it.

    On the CPU speed is not measurable, so every correct kernel becomes the best: the latest correct
    candidate is the base of the next step (a stateless model then keeps its own latest working changes) and
    `best.py` is a real kernel; its speed-up stays unclaimed (1.0) until it is timed on a GPU. Not on a
    degenerate task timed on a GPU: its correctness check cannot tell a real kernel from a copy of the input
    (an activation of non-negative inputs passes as the identity), while its speed was measured, so the
    reference stays.
    """
    on_cpu = evaluation is not None and evaluation.timing_on_cpu
    adopt_untimed = status != "failed" and on_cpu
    if (status == "improved" or adopt_untimed) and source is not None:
        result.best_source, result.best_is_reference = source, False
        result.best_step, result.best_result = step, evaluation
        if status == "improved":
            result.best_speedup_x = speedup or result.best_speedup_x


def replay(result: RunResult, outcome: StepOutcome) -> str:
    """Apply a step made before a cut to `result` as `evaluate_and_record` did; return its GPU arch."""
    if outcome.result is not None:
        note_references(result, outcome.result)
    adopt(result, outcome.step, outcome.status, outcome.source, outcome.result, outcome.speedup_x)
    return outcome.result.gpu_arch if outcome.result is not None else ""
