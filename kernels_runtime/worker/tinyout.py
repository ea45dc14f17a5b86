"""Tiny outputs, checked at a tolerance scaled to the output (EVAL.md, "Tiny outputs").

A reference output within the request's tolerance of zeros or of a constant cannot tell a kernel from a zero,
constant or uniform (1/N) output, nor from a stale one that repeats an earlier call's result: a row softmax over
393,216 columns (every value ~2.5e-6) passes atol 1e-4 with any of them. Before the candidate's first call the
reference runs once at trial 1's inputs. When its output is trivial at the request's tolerance, every later
comparison of the evaluation (extra shapes, trials, task configurations, recheck after timing) uses, per output,
atol · max|reference| of that trial's own reference output (never above atol; `checks.scaled_atols`), and the
main variant gets at least `MIN_TRIALS` seeds. The scaled tolerance is applied only where it can discriminate and
an honest kernel can meet it:
1. at the scaled tolerance the output is not trivial (not all ~0, not ~constant);
2. a second seed's output is outside the first one's scaled tolerance (the output depends on the inputs);
3. the reference run in float64 agrees with the float32 reference to a tenth of the scaled tolerance (the
   tolerance is above the reference's own rounding error, so a kernel as accurate as torch passes it).
Otherwise comparisons keep the request's tolerance and the task is flagged degenerate, as before: a correct
candidate there earns no win. The check's verdict is the `tiny_output_tolerance` entry, and the largest absolute
tolerance applied is `EvalResult.scaled_atol`.
"""

from __future__ import annotations

import copy
import types
from typing import Any

import torch

from htam_graph.kernels_runtime.recorder import Recorder
from htam_graph.kernels_runtime.worker import checks
from htam_graph.kernels_runtime.worker.execution import make_inputs, sync
from htam_graph.kernels_runtime.worker.trials import TrialContext, call_reference, trial_seed
from htam_graph.model import ErrorKind, EvalRequest

__all__ = ["CHECK", "MIN_TRIALS", "finish", "main_trials", "prepare"]

CHECK = "tiny_output_tolerance"
MIN_TRIALS = 3  # seeds at the main variant under the scaled tolerance (a stale candidate fails the second)
_FLOAT64_MARGIN = (
    0.1  # the float64 reference must agree with the float32 one to this fraction of the tolerance
)


def prepare(req: EvalRequest, rec: Recorder, ctx: TrialContext, task: types.ModuleType, ref: Any) -> None:
    """Decide whether this evaluation compares at the scaled tolerance (`ctx.scaled_atol`); record why."""
    seed = trial_seed(req, 0, 0)
    inputs = make_inputs(task, seed, ctx.device)
    out = call_reference(ref, checks.clone_inputs(inputs), seed, ctx)
    trivial = checks.trivial_output_reason(out, ctx.rtol, ctx.atol)
    if trivial is None:
        rec.skip(CHECK, "the reference output is not within tolerance of zeros or a constant")
        return
    atols = checks.scaled_atols(out, ctx.atol)
    why_not = _not_discriminative(req, ctx, task, ref, out, atols) or _float64_problem(
        ref, inputs, out, seed, ctx, atols
    )
    if why_not:
        rec.skip(CHECK, f"{trivial}; the scaled tolerance is not applied: {why_not}")
        return
    ctx.scaled_atol = True
    rec.set(scaled_atol=max(atols))
    rec.checks[CHECK] = (
        f"pending: {trivial}; compared at atol={ctx.atol:g} x max|reference| per output "
        f"(trial 1: {_show(atols)}), rtol={ctx.rtol:g}"
    )


def main_trials(req: EvalRequest, ctx: TrialContext) -> int:
    """How many seeds the main variant runs: the request's, at least MIN_TRIALS under the scaled tolerance."""
    return max(req.trials, MIN_TRIALS) if ctx.scaled_atol else req.trials


def finish(rec: Recorder, ctx: TrialContext | None) -> None:
    """Settle the check's entry once the pipeline ended: pass, fail (a comparison at the scaled tolerance
    failed), or not reached (the candidate failed otherwise first)."""
    state = rec.checks.get(CHECK, "")
    if not state.startswith("pending: "):
        return
    note = state.removeprefix("pending: ")
    if ctx is not None and ctx.largest_scaled_atol > 0:
        rec.set(scaled_atol=ctx.largest_scaled_atol)
    kind = rec.fields.get("error_kind")
    if kind is None:
        rec.ok(CHECK, note)
    elif kind is ErrorKind.MISMATCH and rec.fields.get("max_abs_err") is not None:
        rec.fail_check(CHECK, f"{str(rec.fields.get('error_excerpt', '')).splitlines()[0][:300]}; {note}")
    else:
        rec.skip(CHECK, f"not reached (an earlier step failed); {note}")


def _show(atols: list[float]) -> str:
    return ", ".join(f"{a:.3g}" for a in atols)


def _not_discriminative(
    req: EvalRequest, ctx: TrialContext, task: types.ModuleType, ref: Any, out: Any, atols: list[float]
) -> str | None:
    """Why the scaled tolerance would not discriminate either (conditions 1 and 2 of the module docstring)."""
    if all(a >= ctx.atol for a in atols):
        return "no output is below 1 in magnitude (scaling would not tighten the tolerance)"
    still = checks.trivial_output_reason(out, ctx.rtol, atols)
    if still:
        return still.replace("the reference output is", "even at the scaled tolerance, it is")
    seed = trial_seed(req, 0, 1)
    other = call_reference(ref, make_inputs(task, seed, ctx.device), seed, ctx)
    samples = [_float_leaves(out), _float_leaves(other)]
    float_atols = [a for a, leaf in zip(atols, checks.flatten(out), strict=True) if _is_float(leaf)]
    if checks.same_across_seeds(samples, ctx.rtol, float_atols):
        return "even at the scaled tolerance, the output of a second seed is the same"
    return None


def _float64_problem(
    ref: Any, inputs: list[Any], out: Any, seed: int, ctx: TrialContext, atols: list[float]
) -> str | None:
    """Why the float32 reference is not accurate to a tenth of the scaled tolerance (condition 3), or None."""
    try:
        twin = copy.deepcopy(ref).double()
        wide = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        torch.manual_seed(seed)
        with torch.no_grad():
            exact = twin(*wide)
        sync(ctx.device)
    except Exception as e:  # the task's own code: not every reference runs in float64
        return f"the reference does not run in float64 ({type(e).__name__}: {str(e)[:120]})"
    leaves = checks.flatten(out)
    exact_leaves = checks.flatten(exact)
    if len(exact_leaves) != len(leaves):
        return "the float64 reference returns a different structure"
    narrowed = [
        e.to(o.dtype) if isinstance(e, torch.Tensor) and isinstance(o, torch.Tensor) else e
        for e, o in zip(exact_leaves, leaves, strict=True)
    ]
    cmp = checks.compare_outputs(
        leaves, narrowed, ctx.rtol * _FLOAT64_MARGIN, [a * _FLOAT64_MARGIN for a in atols]
    )
    if not cmp.ok:
        return f"the float32 reference is not within a tenth of it of the float64 one ({cmp.reason})"
    return None


def _is_float(leaf: Any) -> bool:
    return isinstance(leaf, torch.Tensor) and leaf.is_floating_point()


def _float_leaves(out: Any) -> list[torch.Tensor]:
    return [leaf for leaf in checks.flatten(out) if _is_float(leaf)]
