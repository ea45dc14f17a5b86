"""The two checks on the candidate's outputs after its trials: the deterministic rerun and the task's degeneracy
(`output_not_trivial`), at the tolerance the comparisons used (scaled to a tiny output, tinyout.py)."""

from __future__ import annotations

import types
from typing import Any

import torch

from htam_graph.kernels_runtime.recorder import Recorder
from htam_graph.kernels_runtime.worker import checks
from htam_graph.kernels_runtime.worker.execution import CandidateFailure, make_inputs
from htam_graph.kernels_runtime.worker.trials import (
    TrialContext,
    TrialOutcome,
    call_candidate,
    call_reference,
    trial_atol,
    trial_seed,
)
from htam_graph.model import ErrorKind, EvalRequest

__all__ = ["degeneracy", "deterministic_rerun"]

_DETERMINISM_POISON = 1.0e3  # the second run's poison differs from the first's NaN


def deterministic_rerun(
    req: EvalRequest, rec: Recorder, ctx: TrialContext, task: types.ModuleType, ref: Any, cand: Any
) -> None:
    """Same inputs twice, different poison each time: where the reference is bit-exact, so must the candidate be."""
    seed = trial_seed(req, 0, 900)
    inputs = make_inputs(task, seed, ctx.device)
    ref_a = call_reference(ref, checks.clone_inputs(inputs), seed, ctx)
    ref_b = call_reference(ref, checks.clone_inputs(inputs), seed, ctx)
    ref_det = all(
        not isinstance(a, torch.Tensor) or checks.bitwise_equal(a, b)
        for a, b in zip(checks.flatten(ref_a), checks.flatten(ref_b), strict=True)
    )
    outs = []
    for poison in (float("nan"), _DETERMINISM_POISON):
        checks.poison_allocator(ctx.device, ctx.poison_bytes, poison, sizes=ctx.poison_sizes)
        out, _ = call_candidate(cand, checks.clone_inputs(inputs), seed, ctx)
        outs.append(out)
    if not ref_det:
        rec.skip("deterministic_rerun", "the reference itself is not bit-exact across two runs")
        return
    leaves_a, leaves_b = checks.flatten(outs[0]), checks.flatten(outs[1])
    same = len(leaves_a) == len(leaves_b) and all(
        (
            checks.bitwise_equal(a, b)
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
            else a == b
        )
        for a, b in zip(leaves_a, leaves_b, strict=True)
    )
    if not same:
        raise CandidateFailure(
            ErrorKind.MISMATCH,
            "deterministic_rerun",
            "two runs on the same inputs (different allocator poison) differ while the reference is bit-exact: "
            "uninitialised memory, a race, or atomics",
        )
    rec.ok("deterministic_rerun", "bit-exact across two runs with different poison")


def degeneracy(rec: Recorder, ctx: TrialContext, outcomes: list[TrialOutcome]) -> None:
    """Flag the TASK (not the candidate) when its outputs cannot discriminate (pitfalls 8, 9), at the tolerance
    the comparisons used (scaled to the output under the tiny-output check)."""
    first = outcomes[0]
    atol = trial_atol(ctx, first.ref_out)
    reason = checks.degenerate_reason(
        first.ref_out, [o.sample for o in outcomes], first.inputs, rec.rtol, atol
    )
    at = " at the tiny-output tolerance" if ctx.scaled_atol else ""
    if reason:
        rec.set(task_degenerate=True)
        rec.fail_check("output_not_trivial", f"task degenerate (not a candidate failure){at}: {reason}")
    else:
        rec.ok(
            "output_not_trivial", f"reference varies across {len(outcomes)} seeds and is not ~0/constant{at}"
        )
