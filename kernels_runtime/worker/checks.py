"""Output and input checks of one candidate call (pure functions on tensors; no process or timing logic).

Each function returns None when the check passes and a short reason when it fails, so the harness can record
the reason under the check's name in `EvalResult.checks`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "Comparison",
    "compare_outputs",
    "flatten",
    "clone_inputs",
    "inputs_changed",
    "plain_tensor_problem",
    "bitwise_equal",
    "degenerate_reason",
    "trivial_output_reason",
    "scaled_atols",
    "same_across_seeds",
    "poison_allocator",
]

Tolerance = float | Sequence[float]
"""An absolute tolerance: one for every output leaf, or one per leaf of the flattened reference output (the
tiny-output check scales it to each output, kernels_runtime/worker/tinyout.py)."""

_NONFLOAT_EXACT = "exact"


def flatten(value: Any) -> list[Any]:
    """Leaves of a (nested) tuple/list output, in order; a single value is one leaf."""
    if isinstance(value, list | tuple):
        out: list[Any] = []
        for item in value:
            out.extend(flatten(item))
        return out
    return [value]


def nbytes(value: Any) -> int:
    """Bytes held by the tensors of a (nested) tuple/list value; non-tensor leaves count 0."""
    return sum(t.numel() * t.element_size() for t in flatten(value) if isinstance(t, torch.Tensor))


def _tensors(values: Sequence[Any]) -> Iterator[torch.Tensor]:
    for v in flatten(list(values)):
        if isinstance(v, torch.Tensor):
            yield v


def clone_inputs(inputs: Sequence[Any]) -> list[Any]:
    """Fresh copies of every tensor input (other values are passed through): each call gets its own storage."""
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and values, NaN equal to NaN at the same positions."""
    if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
        return False
    if a.is_floating_point() or a.is_complex():
        same = (a == b) | (torch.isnan(a) & torch.isnan(b))
        return bool(same.all().item())
    return bool(torch.equal(a, b))


def inputs_changed(before: Sequence[Any], after: Sequence[Any]) -> str | None:
    """Which tensor input the candidate modified in place (pitfall 2), or None."""
    for i, (a, b) in enumerate(zip(before, after, strict=True)):
        if isinstance(a, torch.Tensor) and not bitwise_equal(a, b):
            return f"input #{i} was modified in place by the candidate"
    return None


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    start = storage.data_ptr()
    return start, start + storage.nbytes()


def plain_tensor_problem(out: Any, inputs: Sequence[Any], device: torch.device) -> str | None:
    """Why a candidate output is not a plain, materialised tensor of its own (pitfalls 1, 5), or None.

    Every leaf must be exactly `torch.Tensor` (no subclass, fake, lazy or meta tensor), on the evaluated
    device, with a real storage pointer, and must not share storage with any input.
    """
    leaves = flatten(out)
    if not leaves:
        return "the candidate returned an empty tuple"
    input_spans = [_storage_span(t) for t in _tensors(inputs) if t.numel() > 0]
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            continue  # non-tensor leaves are compared by value
        if type(leaf) is not torch.Tensor:
            return f"output #{i} is a {type(leaf).__module__}.{type(leaf).__qualname__}, not a plain torch.Tensor"
        if leaf.is_meta or leaf.device.type != device.type:
            return f"output #{i} is on {leaf.device}, expected {device.type}"
        if leaf.numel() == 0:
            continue
        try:
            start, end = _storage_span(leaf)
        except Exception as e:  # a tensor without data (e.g. a functional or sparse wrapper)
            return f"output #{i} has no readable storage ({type(e).__name__})"
        if start == 0:
            return f"output #{i} has no storage (data_ptr 0)"
        for j, (in_start, in_end) in enumerate(input_spans):
            if start < in_end and in_start < end:
                return f"output #{i} shares memory with input #{j} (a view or in-place result)"
    return None


_COMPARE_CHUNK = 1 << 24  # elements per float64 comparison chunk (128 MiB per temporary)


@dataclass(frozen=True)
class Comparison:
    """Outcome of comparing a candidate output with the reference output."""

    ok: bool
    reason: str = ""
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0


def _compare_tensor(i: int, out: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float) -> Comparison:
    if out.shape != ref.shape:
        return Comparison(False, f"output #{i} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return Comparison(False, f"output #{i} has dtype {out.dtype}, expected {ref.dtype}")
    if out.numel() == 0:
        return Comparison(True)
    if not (ref.is_floating_point() or ref.is_complex()):
        ok = bool(torch.equal(out.to(ref.device), ref))
        return Comparison(ok, "" if ok else f"output #{i} differs (exact comparison of {ref.dtype})")
    # Compared in float64 chunks: a whole-tensor float64 comparison of a 1.6e9-element KernelBench output needs
    # several 13 GB temporaries (seen: out of memory on an H200), and the harness must not fail where the
    # candidate did nothing wrong.
    out_flat, ref_flat = out.detach().reshape(-1), ref.detach().reshape(-1)
    max_abs = max_rel = 0.0
    n_nonfinite = n_outside = 0
    for begin in range(0, ref_flat.numel(), _COMPARE_CHUNK):
        out64 = out_flat[begin : begin + _COMPARE_CHUNK].to(device=ref.device, dtype=torch.float64)
        ref64 = ref_flat[begin : begin + _COMPARE_CHUNK].to(torch.float64)
        ref_finite = torch.isfinite(ref64)
        # Where the reference is finite the candidate must be finite (NaN/Inf never pass); where the reference
        # itself is non-finite (degenerate task, reported separately) the candidate must match it exactly.
        bad_nonfinite = (~torch.isfinite(out64) & ref_finite) | (~ref_finite & ~bitwise_mask(out64, ref64))
        diff = (out64 - ref64).abs().where(ref_finite, torch.zeros_like(ref64))
        diff = diff.nan_to_num(nan=float("inf"))
        max_abs = max(max_abs, float(diff.max().item()))
        rel = (diff / (ref64.abs() + atol)).where(ref_finite, torch.zeros_like(ref64))
        max_rel = max(max_rel, float(rel.max().item()))
        n_nonfinite += int(bad_nonfinite.sum().item())
        n_outside += int((diff > atol + rtol * ref64.abs()).sum().item())
        del out64, ref64, ref_finite, bad_nonfinite, diff, rel
    if n_nonfinite:
        return Comparison(
            False,
            f"output #{i} has {n_nonfinite} NaN/Inf values where the reference is finite",
            max_abs,
            max_rel,
        )
    if n_outside:
        return Comparison(
            False,
            f"output #{i}: {n_outside}/{ref.numel()} elements outside rtol={rtol:g} atol={atol:g} (max abs err {max_abs:.3g})",
            max_abs,
            max_rel,
        )
    return Comparison(True, "", max_abs, max_rel)


def bitwise_mask(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise: equal, or both NaN."""
    return (a == b) | (torch.isnan(a) & torch.isnan(b))


def per_leaf(atol: Tolerance, leaves: int) -> list[float]:
    """The absolute tolerance of each of `leaves` output leaves."""
    if isinstance(atol, int | float):
        return [float(atol)] * leaves
    if len(atol) != leaves:
        raise ValueError(f"{len(atol)} tolerances for {leaves} output leaves")
    return [float(a) for a in atol]


def compare_outputs(out: Any, ref: Any, rtol: float, atol: Tolerance) -> Comparison:
    """Compare (possibly tuple) outputs: same structure, dtype and shape; values within tolerance.

    `atol` is one tolerance, or one per leaf of the flattened reference output."""
    outs, refs = flatten(out), flatten(ref)
    if len(outs) != len(refs):
        return Comparison(False, f"the candidate returned {len(outs)} outputs, the reference {len(refs)}")
    worst = Comparison(True)
    for i, (o, r, tol) in enumerate(zip(outs, refs, per_leaf(atol, len(refs)), strict=True)):
        if isinstance(r, torch.Tensor):
            if not isinstance(o, torch.Tensor):
                return Comparison(False, f"output #{i} is a {type(o).__name__}, expected a tensor")
            c = _compare_tensor(i, o, r, rtol, tol)
        else:
            same = type(o) is type(r) and (
                o == r or (isinstance(r, float) and abs(o - r) <= tol + rtol * abs(r))
            )
            c = Comparison(bool(same), "" if same else f"output #{i} is {o!r}, expected {r!r}")
        if not c.ok:
            return c
        worst = Comparison(
            True, "", max(worst.max_abs_err, c.max_abs_err), max(worst.max_rel_err, c.max_rel_err)
        )
    return worst


def _within(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> bool:
    a_flat, b_flat = a.reshape(-1), b.reshape(-1)
    for begin in range(0, b_flat.numel(), _COMPARE_CHUNK):
        a64 = a_flat[begin : begin + _COMPARE_CHUNK].double()
        b64 = b_flat[begin : begin + _COMPARE_CHUNK].double()
        if not bool(((a64 - b64).abs() <= atol + rtol * b64.abs()).all().item()):
            return False
    return True


def _float_leaves(out: Any, atol: Tolerance) -> list[tuple[torch.Tensor, float]]:
    """The floating tensor leaves of `out`, each with its absolute tolerance."""
    leaves = flatten(out)
    return [
        (t, a)
        for t, a in zip(leaves, per_leaf(atol, len(leaves)), strict=True)
        if isinstance(t, torch.Tensor) and t.is_floating_point()
    ]


def trivial_output_reason(out: Any, rtol: float, atol: Tolerance) -> str | None:
    """Why a finite reference output is within tolerance of a trivial output (zeros, or a constant, which a
    uniform 1/N is), so that such an output would pass the comparison; None otherwise (or when not finite)."""
    first = _float_leaves(out, atol)
    if not first or any(not bool(torch.isfinite(t).all().item()) for t, _ in first):
        return None
    if all(_within(torch.zeros_like(t), t, rtol, a) for t, a in first):
        return "the reference output is within tolerance of zeros (a zero output would pass)"
    if all(
        t.numel() > 1 and _within(torch.full_like(t, t.mean(dtype=torch.float64).item()), t, rtol, a)
        for t, a in first
    ):
        return "the reference output is within tolerance of a constant"
    return None


def _peak(t: torch.Tensor) -> float:
    """max|t| (NaN when t holds a NaN), in chunks: no full-size temporary."""
    flat = t.detach().reshape(-1)
    peaks = [
        float(flat[begin : begin + _COMPARE_CHUNK].abs().max().item())
        for begin in range(0, flat.numel(), _COMPARE_CHUNK)
    ]
    return math.nan if any(math.isnan(p) for p in peaks) else max(peaks)


def scaled_atols(ref: Any, atol: float) -> list[float]:
    """One absolute tolerance per leaf of the flattened reference output, scaled to the output: `atol` times
    max|leaf| for a floating tensor leaf whose largest magnitude is below 1 (never above `atol`; an all-zero or
    non-finite leaf keeps `atol`), `atol` for every other leaf (kernels_runtime/worker/tinyout.py)."""
    out = []
    for leaf in flatten(ref):
        tol = atol
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.numel():
            peak = _peak(leaf)
            if math.isfinite(peak) and 0.0 < peak < 1.0:
                tol = atol * peak
        out.append(tol)
    return out


def same_across_seeds(samples: Sequence[Sequence[torch.Tensor]], rtol: float, atol: Tolerance) -> bool:
    """Whether the output samples of different seeds (`samples[k]`: trial k's floating leaves) are inside each
    other's tolerance: the output does not depend on the inputs."""
    if len(samples) <= 1:
        return False
    atols = per_leaf(atol, len(samples[0]))
    return all(
        len(other) == len(samples[0])
        and all(
            a.shape == b.shape and _within(a, b, rtol, tol)
            for a, b, tol in zip(other, samples[0], atols, strict=True)
        )
        for other in samples[1:]
    )


def degenerate_reason(
    first_out: Any,
    samples: Sequence[Sequence[torch.Tensor]],
    first_inputs: Sequence[Any],
    rtol: float,
    atol: Tolerance,
) -> str | None:
    """Why a task's reference outputs make correctness meaningless (pitfalls 8, 9), or None.

    `first_out` is the reference output of the first trial on `first_inputs`; `samples[k]` a fixed strided
    sample of trial k's output (different seeds). Degenerate: a non-finite reference; every output inside the
    tolerance of zeros or of its own mean (a constant would pass); the samples of different seeds inside each
    other's tolerance (the output does not depend on the inputs); or an output bit-equal to an input.
    `atol` is one tolerance or one per leaf of `first_out` (the tiny-output check's scaled tolerances).
    """
    floats = _float_leaves(first_out, atol)
    if not floats:
        return (
            None  # integer outputs (argmin, ...) are compared exactly; a constant there is still informative
        )
    if any(not bool(torch.isfinite(t).all().item()) for t, _ in floats):
        return "the reference output contains NaN/Inf"
    trivial = trivial_output_reason(first_out, rtol, atol)
    if trivial:
        return trivial
    if same_across_seeds(samples, rtol, [a for _, a in floats]):
        return "the reference output does not depend on the inputs (same across seeds)"
    for t, _ in floats:
        for j, x in enumerate(_tensors(first_inputs)):
            if x.shape == t.shape and x.dtype == t.dtype and bitwise_equal(x.to(t.device), t):
                return f"the reference output equals input #{j} (the op is the identity on these inputs)"
    return None


def poison_allocator(
    device: torch.device,
    nbytes: int,
    value: float = float("nan"),
    sizes: Sequence[int] = (),
    copies: int = 16,
) -> None:
    """Fill fresh memory with `value` and free it, so blocks the candidate allocates next hold poison (pitfalls 1, 16).

    On CUDA the caching allocator is emptied first (so no cached block still holds an old result), then one large
    block is filled and released back into the cache, where the candidate's `empty`/`empty_like` allocations are
    carved from. Blocks of exactly `sizes` bytes (the sizes of the inputs and outputs, i.e. what a candidate
    typically allocates) are poisoned `copies` times each too: on the CPU that is what makes malloc hand the
    poisoned chunks back (same-size free lists); best effort there, since glibc may also return fresh zero pages.
    """
    nbytes = max(int(nbytes), 1 << 20)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info()
        nbytes = min(nbytes, int(free * 0.5))
    blocks = [torch.empty(nbytes // 4, dtype=torch.float32, device=device)]
    blocks += [torch.empty((256 << 10) // 4, dtype=torch.float32, device=device) for _ in range(8)]
    for size in sorted(set(sizes)):
        if 0 < size <= nbytes:
            n = max(1, min(copies, nbytes // size))  # at most ~nbytes per size
            blocks += [torch.empty(size, dtype=torch.uint8, device=device) for _ in range(n)]
    for b in blocks:
        if b.dtype == torch.uint8:
            b.view(torch.uint8).fill_(
                0xFF if value != value else 0x44
            )  # 0xFF bytes are NaN in every float dtype
        else:
            b.fill_(value)
    if device.type == "cuda":
        torch.cuda.synchronize()
    del blocks
