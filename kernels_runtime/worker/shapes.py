"""Shape variants of a task: the default sizes, CPU-sized smoke sizes, and extra variants.

Sizes are the task file's module-level constants (see `taskmod`). Which constants are sizes is a heuristic on
the name, split into `_`-separated tokens (documented in the README of the runtime):

* never a size: floats, bools, values < 1, and names with a token in `NON_SIZE_TOKENS` (eps, slope, scale,
  scaling, p, dropout, pdrop, value, multiplier, divisor, factor, momentum, constant, seed, prob, alpha, beta,
  temperature, clamp, and min/max unless the name also has a size word like `max_seqlen`);
* a size that is never scaled (it must divide or fit the other sizes): names with a token in
  `STRUCTURAL_TOKENS` (kernel, stride, padding, dilation, groups, heads, pool, block, window...);
* a batch size: a name with the token `batch`.

Integer literals among the tensor sizes that `get_inputs` builds (`torch.rand(batch_size, 3, 224, 224)`) are
sizes too, addressed as `get_inputs#k` (see `taskmod`), unless the same value is written elsewhere in the task
(a channel count the model's `__init__` repeats as a literal, or any module constant's value): such a literal is
tied to the model and kept. They scale with the same factor as the constants; when that ladder cannot shrink
them (a flatten into a literal-sized Linear, say) the search runs again with the literals kept.

Smoke sizes: every scalable size above `FLOOR` is divided by one power-of-two factor (so ratios and most
divisibility survive) and batch sizes are capped at `SMOKE_BATCH`. The mildest factor whose meta-device estimate
fits the element/parameter caps is tried first; the reference then really runs once on the CPU, its matmul/conv
FLOPs counted. On an error or an empty/NaN output the search backs off (milder scaling); when the run is over
budget (CPU time, FLOPs over `MAX_FLOPS` or a tensor of the forward over `MAX_INTERMEDIATE` elements, which
an interpreted candidate pays for) it scales harder. Results
are cached per source sha256 (a pure function of the source); candidate results are never cached here.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from htam_graph.errors import TaskError
from htam_graph.kernels_runtime.worker import refprobe
from htam_graph.kernels_runtime.worker.size_names import (
    FLOOR,
    is_batch,
    is_structural,
    scalable_literals,
    sequence_constants,
    size_constants,
)
from htam_graph.kernels_runtime.worker.taskmod import LITERAL_PREFIX, OverrideValue

log = logging.getLogger(__name__)

__all__ = [
    "ShapeSpec",
    "size_constants",
    "sequence_constants",
    "scalable_literals",
    "scaled_variant",
    "smoke_overrides",
    "extra_shape_variant",
    "variant_for",
    "clear_cache",
]

SMOKE_BATCH = 2
MAX_ELEMENTS = 1 << 14  # input elements of a smoke variant (meta estimate): Triton candidates run under the
# interpreter on the CPU at ~5 µs per element for elementwise code, and a looped row reduction costs several
# times that (a 65k-element norm row takes ~10 s a call), so smoke tensors stay near sixteen thousand
MAX_PARAMS = 1 << 19  # a Linear's weight is what a hand-written GEMM tiles over, program by program
MAX_FLOPS = 100_000_000  # matmul/conv FLOPs of a smoke variant: a hand-written Triton conv or GEMM pays
# about 1 s per 2-3 MFLOP under the interpreter, so 1e8 keeps one evaluation of such a candidate near a minute
MAX_INTERMEDIATE = MAX_ELEMENTS  # elements of the forward's largest tensor (CPU run): an interpreted kernel
# pays per element of what it reads, an intermediate as much as an input, and an upsampling conv-transpose
# multiplies the capped input (a looped GroupNorm over level2/60's 461k-element conv-transpose output took
# 18 s a call, 377 s an evaluation)
DEFAULT_BUDGET_S = 1.0
# Part of the on-disk cache key of variant selections: raise it when the caps or the search change.
SELECTION_VERSION = 5
_GIVE_UP_FACTOR = 10.0  # stop backing off after a failed step that took this many budgets
_MAX_HARDER = 3  # CPU runs spent looking for a faster variant when the first valid one is over budget


@dataclass(frozen=True)
class ShapeSpec:
    """Overrides for one shape variant of a task, and what validating it showed."""

    shape: str  # "default" or "smoke"
    extra: int  # 0: the base variant; k >= 1: the k-th extra variant
    overrides: dict[str, OverrideValue] = field(default_factory=dict)
    validated: Literal["cpu", "meta", "no"] = "no"
    forward_s: float | None = None  # CPU forward time of the reference, when it was run
    build_s: float | None = None  # CPU time to exec the module, build Model and its inputs
    note: str = ""  # e.g. "constant output": the reference returns a constant at this variant


def _shrink(value: int, factor: int) -> int:
    return value if value <= FLOOR else max(FLOOR, value // factor)


def scaled_variant(
    source: str, factor: int, batch_cap: int | None = SMOKE_BATCH, literals: bool = True
) -> dict[str, OverrideValue]:
    """Overrides dividing every scalable size above FLOOR by `factor` and capping batch sizes at `batch_cap`.

    With `batch_cap=None` batch sizes are divided like the others (for tasks where the batch must equal another
    size, as in KernelBench's hinge loss). Structural sizes (kernel, stride, groups, heads...) are kept. With
    `literals`, the scalable literal sizes of `get_inputs` are divided too. Only changed sizes are returned.
    """
    if factor < 1:
        raise ValueError(f"factor must be >= 1, got {factor}")
    out: dict[str, OverrideValue] = {}
    for name, value in size_constants(source).items():
        if is_batch(name):
            new = min(value, batch_cap) if batch_cap is not None else _shrink(value, factor)
        elif is_structural(name):
            continue
        else:
            new = _shrink(value, factor)
        if new != value:
            out[name] = new
    for name, seq in sequence_constants(source).items():
        if is_structural(name):
            continue
        new_seq = tuple(_shrink(v, factor) for v in seq)
        if new_seq != seq:
            out[name] = new_seq
    for name, value in (scalable_literals(source) if literals else {}).items():
        if _shrink(value, factor) != value:
            out[name] = _shrink(value, factor)
    return out


def _ladder(
    source: str, batch_cap: int | None = SMOKE_BATCH, literals: bool = True
) -> list[dict[str, OverrideValue]]:
    """Distinct scaled variants from mildest (factor 1: batch only) to most aggressive (all at FLOOR)."""
    largest = max(
        [
            *size_constants(source).values(),
            *(max(s) for s in sequence_constants(source).values()),
            *(scalable_literals(source).values() if literals else []),
            1,
        ]
    )
    ladder: list[dict[str, OverrideValue]] = []
    factor = 1
    while True:
        variant = scaled_variant(source, factor, batch_cap, literals)
        if not ladder or variant != ladder[-1]:
            ladder.append(variant)
        if factor >= largest:
            return ladder
        factor *= 2


def _elements(estimate: refprobe.MetaEstimate) -> int:
    return int(estimate.input_numel + estimate.output_numel)


def _fits(estimate: refprobe.MetaEstimate, caps: tuple[int, int, int]) -> bool:
    max_elements, max_params, max_flops = caps
    return (
        estimate.ok
        and _elements(estimate) <= max_elements
        and estimate.param_numel <= max_params
        and estimate.flops <= max_flops
    )


def _caps(estimates: list[refprobe.MetaEstimate]) -> tuple[int, int, int]:
    """The caps, relaxed to twice the ladder's best where no step reaches a cap.

    Otherwise a model whose parameters hardly shrink (VGG's classifier) would be pushed to the most aggressive
    step, shrinking its images to nothing for no gain.
    """
    usable = [e for e in estimates if e.ok] or estimates
    floor_elements = min(_elements(e) for e in usable)
    floor_params = min(e.param_numel for e in usable)
    floor_flops = min(e.flops for e in usable)
    return (
        max(MAX_ELEMENTS, 2 * floor_elements),
        max(MAX_PARAMS, 2 * floor_params),
        max(MAX_FLOPS, 2 * floor_flops),
    )


def _sha(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


_SMOKE_CACHE: dict[tuple[str, float], ShapeSpec] = {}
_EXTRA_CACHE: dict[tuple[str, str, tuple[tuple[str, OverrideValue], ...], int], ShapeSpec] = {}


def clear_cache() -> None:
    """Forget cached shape searches (tests)."""
    _SMOKE_CACHE.clear()
    _EXTRA_CACHE.clear()


def smoke_overrides(source: str, budget_s: float = DEFAULT_BUDGET_S, name: str = "task") -> ShapeSpec:
    """Overrides under which the reference runs on the CPU in about `budget_s`, validated by running it.

    Raises TaskError when no variant of the ladder runs and returns a non-empty, finite output.
    """
    key = (_sha(source), budget_s)
    if key in _SMOKE_CACHE:
        return _SMOKE_CACHE[key]
    spec = _search_smoke(source, budget_s, name)
    _SMOKE_CACHE[key] = spec
    return spec


def _size(estimate: refprobe.MetaEstimate) -> tuple[int, int]:
    return _elements(estimate), int(estimate.param_numel)


def _shrinks(smaller: tuple[int, int], larger: tuple[int, int]) -> bool:
    """Whether a step cuts the inputs or the parameters by at least a quarter (else it is not worth a run)."""
    return any(s <= 0.75 * big for s, big in zip(smaller, larger, strict=True)) or larger == (0, 0)


def _estimates(
    source: str, ladder: list[dict[str, OverrideValue]], name: str
) -> tuple[int, list[bool], list[tuple[int, int]]]:
    """(the mildest step whose meta estimate fits the caps, which steps are small enough to try at all, sizes).

    Inputs and parameters only: the CPU run that follows is the real judge of the cost (and scales harder
    when over budget), and a meta forward of a recurrent model is too slow to do per step. Backing off never
    tries a step beyond 16 times the caps (the default sizes of a big task would take minutes or the memory).
    """
    estimates = [refprobe.estimate_meta(source, name, variant, forward=False) for variant in ladder]
    caps = _caps(estimates)
    hard_caps = (16 * caps[0], 16 * caps[1], 16 * caps[2])
    if not any(e.ok for e in estimates):
        # The model cannot be built on the meta device (it calls .item() while building, say): no estimate.
        # Try every step that changes something, mildest first after the batch-only step.
        tryable = [bool(variant) for variant in ladder]
        start = next((i for i, ok in enumerate(tryable) if ok), len(ladder) - 1)
        return start, tryable, [(0, 0)] * len(ladder)
    start = next((i for i, e in enumerate(estimates) if _fits(e, caps)), len(ladder) - 1)
    tryable = [_fits(e, hard_caps) or i >= start for i, e in enumerate(estimates)]
    return start, tryable, [_size(e) for e in estimates]


def _search_smoke(source: str, budget_s: float, name: str) -> ShapeSpec:
    """Search the batch-capped ladder with the literal sizes of `get_inputs` (when it has scalable ones), then
    without them, then the ladder that scales batch sizes too; the first result that scales what it could
    wins (a literal ladder whose literals could not be shrunk is kept only when nothing else runs)."""
    failures: list[str] = []
    literal_spec: ShapeSpec | None = None
    if scalable_literals(source):
        try:
            literal_spec = _search_ladder(source, _ladder(source, SMOKE_BATCH, True), budget_s, name)
        except TaskError as e:
            failures.append(str(e))
        if literal_spec is not None and any(k.startswith(LITERAL_PREFIX) for k in literal_spec.overrides):
            return literal_spec
    for batch_cap in (SMOKE_BATCH, None):
        if batch_cap is None and literal_spec is not None:
            return literal_spec
        try:
            return _search_ladder(source, _ladder(source, batch_cap, False), budget_s, name)
        except TaskError as e:
            failures.append(str(e))
    raise TaskError(f"task {name}: no smoke shape variant runs on the CPU ({'; '.join(failures)})")


def _search_ladder(
    source: str, ladder: list[dict[str, OverrideValue]], budget_s: float, name: str
) -> ShapeSpec:
    start, tryable, sizes = _estimates(source, ladder, name)
    tried: dict[int, refprobe.ProbeResult] = {}

    def run(i: int) -> refprobe.ProbeResult:
        if i not in tried:
            tried[i] = refprobe.probe_cpu(source, name, ladder[i])
            log.debug("smoke %s step %d %s: %s", name, i, ladder[i], tried[i])
        return tried[i]

    # Back off towards milder steps on errors, harder towards aggressive ones when over budget.
    order = [i for i in [start, *range(start - 1, -1, -1)] if tryable[i]]
    chosen: int | None = None
    previous = ""
    for i in order:
        probe = run(i)
        if probe.ok:
            chosen = i
            break
        if probe.reason == previous or probe.build_s + probe.forward_s > _GIVE_UP_FACTOR * budget_s:
            break  # the same failure at two sizes is not about size; a slower step is no smoke test
        previous = probe.reason
    # Harder steps only help with a size-dependent failure (one failing step alone says nothing either way).
    if chosen is None and (len(order) == 1 or previous != run(start).reason):
        order = list(range(start + 1, len(ladder)))
        chosen = next((i for i in order if run(i).ok), None)
    if chosen is None:
        reasons = "; ".join(f"{ladder[i]}: {r.reason}" for i, r in sorted(tried.items())) or "no step fits"
        raise TaskError(reasons)
    harder = 0
    for i in range(chosen + 1, len(ladder)):
        if not _over_budget(tried[chosen], budget_s) or harder >= _MAX_HARDER:
            break
        if not _shrinks(sizes[i], sizes[chosen]):
            continue  # this step hardly shrinks anything (the cost sits in literal sizes or the weights)
        harder += 1
        probe = run(i)
        if probe.ok and not (probe.constant_output and not tried[chosen].constant_output):
            chosen = i
    if tried[chosen].constant_output:
        chosen = _prefer_varying(chosen, run, tryable)
    result = tried[chosen]
    note = "constant output at every tried variant" if result.constant_output else ""
    return ShapeSpec("smoke", 0, dict(ladder[chosen]), "cpu", result.forward_s, result.build_s, note)


def _over_budget(probe: refprobe.ProbeResult, budget_s: float) -> bool:
    """Whether the reference takes longer than the budget on the CPU, or its FLOPs or its largest tensor
    would make an interpreted candidate slow (the reference's own CPU time says nothing of that: oneDNN runs
    a conv far faster than the interpreter runs any kernel)."""
    return (
        probe.forward_s + probe.build_s > budget_s
        or probe.flops > MAX_FLOPS
        or probe.largest_intermediate > MAX_INTERMEDIATE
    )


def _prefer_varying(chosen: int, run: Callable[[int], refprobe.ProbeResult], tryable: list[bool]) -> int:
    """A constant output proves little: try up to two milder steps for one that varies."""
    for i in range(chosen - 1, max(chosen - 3, -1), -1):
        probe = run(i) if tryable[i] else None
        if probe is not None and probe.ok and not probe.constant_output:
            return i
    return chosen


def _effective(source: str, base: Mapping[str, OverrideValue]) -> dict[str, int]:
    sizes = size_constants(source)
    return {n: int(v) for n, v in {**sizes, **base}.items() if n in sizes and isinstance(v, int)}


def _extra_candidates(
    source: str, base: Mapping[str, OverrideValue], seed: int
) -> list[dict[str, OverrideValue]]:
    """Variants that change the batch by one and one other size by a non-power-of-two factor."""
    current = _effective(source, base)
    batches = [n for n in current if is_batch(n)]
    dims = [n for n in current if not is_batch(n) and not is_structural(n) and current[n] >= 4]
    rng = random.Random(seed)
    rng.shuffle(dims)
    ratios = [(3, 4), (5, 4), (2, 3)]
    rng.shuffle(ratios)
    batch_change: dict[str, OverrideValue] = {
        n: current[n] + 1 if current[n] <= 8 else current[n] * 3 // 4 for n in batches
    }
    candidates: list[dict[str, OverrideValue]] = []
    for dim in dims:
        for num, den in ratios:
            new = max(1, current[dim] * num // den)
            if new != current[dim]:
                candidates.append({**base, **batch_change, dim: new})
    if batch_change:
        candidates.append({**base, **batch_change})
    for dim in dims:
        for num, den in ratios:
            new = max(1, current[dim] * num // den)
            if new != current[dim]:
                candidates.append({**base, dim: new})
    return candidates


def extra_shape_variant(
    source: str,
    base_overrides: Mapping[str, OverrideValue],
    seed: int,
    name: str = "task",
    on_cpu: bool = True,
) -> ShapeSpec:
    """A different valid variant near `base_overrides` (catches candidates that hard-code shapes).

    With `on_cpu` (smoke sizes) each candidate is validated by a real CPU run; otherwise (default sizes, too
    big for this CPU) by a forward on the meta device. Raises TaskError when no size can be varied validly.
    """
    key = (_sha(source), "cpu" if on_cpu else "meta", tuple(sorted(base_overrides.items())), seed)
    if key in _EXTRA_CACHE:
        return _EXTRA_CACHE[key]
    candidates = _extra_candidates(source, base_overrides, seed)
    for variant in candidates[:12]:
        if on_cpu:
            probe = refprobe.probe_cpu(source, name, variant)
            if probe.ok:
                note = "constant output" if probe.constant_output else ""
                spec = ShapeSpec("smoke", seed, variant, "cpu", probe.forward_s, probe.build_s, note)
                _EXTRA_CACHE[key] = spec
                return spec
        else:
            estimate = refprobe.estimate_meta(source, name, variant)
            if estimate.forward_ok:
                spec = ShapeSpec("default", seed, variant, "meta")
                _EXTRA_CACHE[key] = spec
                return spec
    raise TaskError(f"task {name}: no valid extra shape variant (tried {len(candidates[:12])})")


def variant_for(
    source: str,
    shape: Literal["default", "smoke"],
    extra: int = 0,
    name: str = "task",
    budget_s: float = DEFAULT_BUDGET_S,
) -> ShapeSpec:
    """The overrides for `shape`; `extra` = k >= 1 gives the k-th extra variant around it (seed k)."""
    if extra < 0:
        raise ValueError(f"extra must be >= 0, got {extra}")
    if shape == "smoke":
        base = smoke_overrides(source, budget_s, name)
    elif shape == "default":
        base = ShapeSpec("default", 0, {}, "no")
    else:
        raise TaskError(f"unknown shape variant {shape!r} (expected 'default' or 'smoke')")
    if extra == 0:
        return base
    return extra_shape_variant(source, base.overrides, extra, name, on_cpu=shape == "smoke")
