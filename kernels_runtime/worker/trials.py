"""One correctness trial: reference and candidate on fresh, separately cloned inputs, with every per-call check.

The order of the checks inside a trial (pitfall numbers from evaluation.md):
reference computed on its own clones and kept alive, with its input clones (1) → allocator poisoned (1, 16)
→ candidate called on its own clones, reseeded like the reference → precision flags and guard identities still
intact (6, 7) → inputs unchanged (2) → plain tensor, own storage (1, 5) → a custom kernel launched (15)
→ values within tolerance, NaN/Inf never (8).
"""

from __future__ import annotations

import contextlib
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from htam_graph.kernels_runtime.worker import checks, guards
from htam_graph.kernels_runtime.worker.execution import (
    CandidateFailure,
    HarnessFailure,
    candidate_call,
    make_inputs,
    sync,
)
from htam_graph.model import ErrorKind, EvalRequest, PrecisionPolicy

__all__ = [
    "TrialContext",
    "TrialOutcome",
    "attributed",
    "call_candidate",
    "call_reference",
    "run_trial",
    "trial_atol",
    "trial_seed",
]

_SAMPLE = 4096  # elements kept per trial output for the across-seed degeneracy check


@dataclass
class TrialContext:
    """What every trial needs, fixed for one evaluation."""

    device: torch.device
    policy: PrecisionPolicy
    rtol: float
    atol: float
    require_kernel: bool
    counter: guards.LaunchCounter
    identities: guards.IdentitySnapshot
    candidate_file: str
    poisoned_trials: int = 0
    poison_bytes: int = 0
    launches: list[int] = field(default_factory=list)
    first_call_s: float | None = None  # the first candidate forward (includes Triton JIT compilation)
    on_first_call: Callable[[float], None] | None = None  # told once the candidate has run (it compiled)
    poison_sizes: list[int] = field(default_factory=list)  # byte sizes of the last trial's inputs and outputs
    # The tiny-output check (tinyout.py): every comparison uses atol scaled to the trial's reference output;
    # the largest absolute tolerance such a comparison applied.
    scaled_atol: bool = False
    largest_scaled_atol: float = 0.0


@dataclass
class TrialOutcome:
    """The reference output (kept for degeneracy checks), a small sample of it, and the error stats."""

    inputs: list[Any]
    ref_out: Any
    sample: list[torch.Tensor]
    max_abs_err: float
    max_rel_err: float


def call_reference(ref: Any, inputs: Sequence[Any], seed: int, ctx: TrialContext) -> Any:
    """The reference forward under pinned fp32 flags and the trial's seed (dropout & co reproducible)."""
    guards.pin_precision(ctx.policy)
    try:
        torch.manual_seed(seed)
        with torch.no_grad():
            out = ref(*inputs)
        sync(ctx.device)
    except Exception as e:
        raise HarnessFailure(f"the reference forward failed: {type(e).__name__}: {e}") from e
    return out


def call_candidate(cand: Any, inputs: Sequence[Any], seed: int, ctx: TrialContext) -> tuple[Any, int]:
    """The candidate forward, synchronised (asynchronous CUDA errors surface here); returns (out, launches)."""
    before = ctx.counter.total

    def forward() -> Any:
        torch.manual_seed(seed)
        with torch.no_grad():
            out = cand(*inputs)
        sync(ctx.device)
        return out

    start = time.perf_counter()
    out = candidate_call(forward, ctx.candidate_file, "the candidate forward raised")
    if ctx.first_call_s is None:
        ctx.first_call_s = time.perf_counter() - start
        if ctx.on_first_call is not None:
            ctx.on_first_call(ctx.first_call_s)
    launches = ctx.counter.total - before
    ctx.launches.append(launches)
    verify_guards(ctx)
    return out, launches


def verify_guards(ctx: TrialContext) -> None:
    """Precision flags and the timer/harness identities must be as the worker set them (pitfalls 6, 7)."""
    why = guards.precision_violation(ctx.policy)
    if why:
        raise CandidateFailure(ErrorKind.HACK_DETECTED, "tf32_pinned_off", why)
    changed = ctx.identities.changed("timers")
    if changed:
        raise CandidateFailure(
            ErrorKind.HACK_DETECTED, "timer_identity", f"timer functions replaced: {changed}"
        )
    changed = ctx.identities.changed("harness")
    if changed:
        raise CandidateFailure(
            ErrorKind.HACK_DETECTED, "harness_identity", f"comparison functions replaced: {changed}"
        )


def _sizes(values: Sequence[Any]) -> list[int]:
    return [t.numel() * t.element_size() for t in checks.flatten(list(values)) if isinstance(t, torch.Tensor)]


def _sample(out: Any) -> list[torch.Tensor]:
    """At most _SAMPLE elements of each floating output, at positions that depend only on its size.

    The positions follow the golden-ratio (Weyl) sequence, which has no period: a regular stride can alias with
    the row length of a row-major output and sample one column only. On the H200 the 32768 x 32768 output of
    KernelBench's cumsum_exclusive, sampled every 2**18 elements, showed only its all-zero first column, so the
    task was called degenerate ("same across seeds") and a 4.3x kernel went uncounted.
    """
    sampled = []
    for t in checks.flatten(out):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            flat = t.detach().reshape(-1)
            sampled.append(flat[sample_positions(flat.numel(), flat.device)].clone())
    return sampled


_GOLDEN = 0.6180339887498949  # (sqrt(5) - 1) / 2


def sample_positions(numel: int, device: torch.device) -> torch.Tensor:
    """Indices of the degeneracy sample of a flat tensor of `numel` elements (all of them when it is small)."""
    if numel <= _SAMPLE:
        return torch.arange(numel, device=device)
    k = torch.arange(_SAMPLE, dtype=torch.float64, device=device)
    return torch.floor(torch.frac(k * _GOLDEN) * numel).long().clamp_(max=numel - 1)


def _has_poison(out: Any) -> bool:
    return any(
        isinstance(t, torch.Tensor) and t.is_floating_point() and bool(torch.isnan(t).any().item())
        for t in checks.flatten(out)
    )


def run_trial(
    ctx: TrialContext,
    task: types.ModuleType,
    ref: Any,
    cand: Any,
    seed: int,
    label: str,
    cand_storage: list[Any] | None = None,
) -> TrialOutcome:
    """One trial at `seed`. With `cand_storage`, the candidate is called on those tensors refilled in place with
    the fresh values (same storage as before, new contents: defeats memoisation by pointer, pitfall 3/12)."""
    inputs = make_inputs(task, seed, ctx.device)
    ref_inputs = checks.clone_inputs(inputs)
    ref_out = call_reference(ref, ref_inputs, seed, ctx)
    # Poison after the reference ran; its output and input clones stay referenced until the candidate returns,
    # so neither can be recycled into the candidate's "fresh" buffers.
    ctx.poison_bytes = 2 * (checks.nbytes(inputs) + checks.nbytes(ref_out)) + (64 << 20)
    if ctx.device.type == "cpu":
        ctx.poison_bytes = min(ctx.poison_bytes, 256 << 20)
    ctx.poison_sizes = _sizes(list(inputs) + [ref_out])
    checks.poison_allocator(ctx.device, ctx.poison_bytes, sizes=ctx.poison_sizes)
    ctx.poisoned_trials += 1
    if cand_storage is None:
        cand_inputs = checks.clone_inputs(inputs)
    else:
        cand_inputs = cand_storage
        for dst, src in zip(cand_inputs, inputs, strict=True):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
    out, launches = call_candidate(cand, cand_inputs, seed, ctx)
    why = checks.inputs_changed(inputs, cand_inputs)
    if why:
        raise CandidateFailure(ErrorKind.HACK_DETECTED, "inputs_unchanged", f"{label}: {why}")
    why = checks.plain_tensor_problem(out, list(cand_inputs) + list(inputs), ctx.device)
    if why:
        raise CandidateFailure(ErrorKind.HACK_DETECTED, "plain_tensor_output", f"{label}: {why}")
    if ctx.require_kernel and launches == 0:
        raise CandidateFailure(
            ErrorKind.HACK_DETECTED,
            "kernel_launched",
            f"{label}: the forward launched no Triton kernel and called no __global__ extension function "
            "(a torch fallback, pitfall 15)",
        )
    cmp = checks.compare_outputs(out, ref_out, ctx.rtol, trial_atol(ctx, ref_out))
    if not cmp.ok:
        check, reason = "correctness", cmp.reason
        if ctx.scaled_atol:
            reason += " (the tiny-output tolerance: atol scaled to max|reference|)"
        if _has_poison(out):
            # NaN is the poison written into recycled memory: an uninitialised or reused buffer shows up here
            # (a kernel that computes NaN shows up here too; both are mismatches).
            check, reason = (
                "reference_kept_alive_and_poisoned",
                f"{cmp.reason} (NaN = the allocator poison: uninitialised or recycled memory, or a NaN result)",
            )
        failure = CandidateFailure(ErrorKind.MISMATCH, check, f"{label}: {reason}")
        failure.max_abs_err, failure.max_rel_err = cmp.max_abs_err, cmp.max_rel_err
        raise failure
    del ref_inputs
    return TrialOutcome(inputs, ref_out, _sample(ref_out), cmp.max_abs_err, cmp.max_rel_err)


def trial_atol(ctx: TrialContext, ref_out: Any) -> checks.Tolerance:
    """The absolute tolerance of a comparison with `ref_out`: the request's, or per output scaled to it under
    the tiny-output check (tinyout.py), whose largest value is kept in the context."""
    if not ctx.scaled_atol:
        return ctx.atol
    atols = checks.scaled_atols(ref_out, ctx.atol)
    ctx.largest_scaled_atol = max([ctx.largest_scaled_atol, *atols])
    return atols


def trial_seed(req: EvalRequest, variant: int, trial: int) -> int:
    """The seed of one trial: distinct per request seed, shape variant and trial."""
    return req.seed * 100_003 + variant * 1_009 + trial


@contextlib.contextmanager
def attributed(check: str) -> Iterator[None]:
    """Mismatches and runtime errors inside a phase are charged to that phase's check (hacks keep their own)."""
    try:
        yield
    except CandidateFailure as f:
        if f.kind is not ErrorKind.HACK_DETECTED:
            f.check = check
        raise
