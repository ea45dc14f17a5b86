"""The evaluation pipeline of one request, run inside the worker process (never in the caller).

static checks → shape variants → task module → candidate import (compile) → the tolerance of a tiny reference
output (tinyout.py) → extra shape variants (the smaller ones first, so the candidate's first call is never at the
main shape) → correctness trials at the main variant → larger extra variants, task configurations →
deterministic rerun → task degeneracy → interleaved timing → recheck after timing → speed of light. Each step
records its named check; the first failure decides the error kind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from htam_graph.errors import TaskError
from htam_graph.kernels_runtime import diskcache, gpulock
from htam_graph.kernels_runtime.precheck import StaticRejection, static_verdict
from htam_graph.kernels_runtime.recorder import Recorder
from htam_graph.kernels_runtime.worker import guards, output_checks, shapes, sharing, taskmod, tinyout
from htam_graph.kernels_runtime.worker.excerpt import exception_excerpt
from htam_graph.kernels_runtime.worker.execution import (
    CandidateFailure,
    HarnessFailure,
    build_models,
    load_candidate,
    temporary_globals,
)
from htam_graph.kernels_runtime.worker.time_candidate import time_and_recheck
from htam_graph.kernels_runtime.worker.trials import (
    TrialContext,
    TrialOutcome,
    attributed,
    run_trial,
    trial_seed,
    verify_guards,
)
from htam_graph.kernels_runtime.worker.variants import configurations as declared_configurations
from htam_graph.model import ErrorKind, EvalRequest, EvalResult

log = logging.getLogger(__name__)

__all__ = [
    "evaluate_here",
    "load_task_variant",
    "main_overrides",
    "variant_label",
    "variants_for",
    "WorkerState",
]

_EXTRA_TRIALS = 2  # trials per extra shape variant


class WorkerState:
    """Process-wide guards, installed once before any candidate code runs."""

    def __init__(self) -> None:
        self.identities = guards.snapshot_identities()
        self.counter = guards.LaunchCounter()
        self.counter.install()
        # Told "queued" / "admitted" around every wait for the GPU (gpulock: memory budget, shared and exclusive
        # lock); the worker forwards them to the progress file and the evaluator stops the request's clock.
        self.progress: Callable[[str], None] = lambda _event: None
        self.trial_context: TrialContext | None = None  # the current evaluation's (its tiny-output check)


def _environment(rec: Recorder, device: torch.device) -> None:
    rec.set(torch_version=torch.__version__, timing_on_cpu=device.type != "cuda")
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        rec.set(gpu_name=torch.cuda.get_device_name(device), gpu_arch=f"sm_{major}{minor}")
    else:
        rec.set(gpu_name="", gpu_arch="cpu")


def _static(req: EvalRequest, rec: Recorder) -> None:
    try:
        static_verdict(req, rec)
    except StaticRejection as r:
        raise CandidateFailure(r.kind, r.check, str(r)) from r


# Where the worker caches shape-variant selections (set by worker.main from the evaluator's cache dir; "" = off).
VARIANT_CACHE_DIR = ""


def _variants(req: EvalRequest) -> list[dict[str, Any]]:
    """`_select_variants`, cached on disk per (selection rules, task source, shape, extra count).

    The selection is a pure function of the task source (validating a default-size variant on the meta device
    costs ~5 s of one-time imports per worker process, paid by every evaluation otherwise); it is read and written
    before any candidate code runs. Candidate results are never cached.
    """
    return diskcache.cached_json(
        VARIANT_CACHE_DIR,
        f"{shapes.SELECTION_VERSION}|{req.shape}|{req.extra_shapes}|{req.task_source}",
        lambda: _select_variants(req),
        _decode_variants,
    )


def _decode_variants(cached: Any) -> list[dict[str, Any]] | None:
    if not (isinstance(cached, list) and cached and all(isinstance(v, dict) for v in cached)):
        return None
    # JSON has no tuples: sequence-valued size constants (kernel_size=(3, 5)) come back as tuples
    return [{k: tuple(x) if isinstance(x, list) else x for k, x in v.items()} for v in cached]


def _select_variants(req: EvalRequest) -> list[dict[str, Any]]:
    """Overrides of the main variant, then of each extra variant that could be built (TaskError: none)."""
    name = req.task_key
    try:
        main = shapes.variant_for(req.task_source, req.shape, 0, name=name).overrides
    except TaskError as e:
        raise HarnessFailure(f"no {req.shape} shape variant for {name}: {e}") from e
    out: list[dict[str, Any]] = [dict(main)]
    for k in range(1, req.extra_shapes + 1):
        try:
            out.append(dict(shapes.variant_for(req.task_source, req.shape, k, name=name).overrides))
        except TaskError as e:
            log.info("extra variant %d of %s: %s", k, name, e)
            break
    return out


def _load_task(req: EvalRequest, overrides: dict[str, Any]) -> types.ModuleType:
    try:
        module: types.ModuleType = taskmod.load_task_module(req.task_source, req.task_key, overrides)
        return module
    except TaskError as e:
        raise HarnessFailure(str(e)) from e


def variants_for(req: EvalRequest) -> list[dict[str, Any]]:
    """The overrides of the request's main shape variant, then of its extra variants (cached on disk)."""
    return _variants(req)


def main_overrides(req: EvalRequest) -> dict[str, Any]:
    """The overrides of the request's main shape variant."""
    return _variants(req)[0]


def load_task_variant(req: EvalRequest, overrides: dict[str, Any]) -> types.ModuleType:
    """The task module at one variant (HarnessFailure when it does not load)."""
    return _load_task(req, overrides)


def variant_label(shape: str, overrides: dict[str, Any]) -> str:
    """`default`, or the shape name with the variant's size overrides (`smoke {N=64}`)."""
    return _variant_label(shape, overrides)


def _variant_label(shape: str, overrides: dict[str, Any]) -> str:
    if not overrides:
        return shape
    return f"{shape} {{{', '.join(f'{k}={v}' for k, v in sorted(overrides.items()))}}}"


def evaluate_here(req: EvalRequest, state: WorkerState) -> EvalResult:
    """Run the whole pipeline for one request in this process and return its result (never raises)."""
    rec = Recorder(req)
    state.trial_context = None
    start = time.perf_counter()
    device = torch.device(req.device)
    try:
        _environment(rec, device)
        with tempfile.TemporaryDirectory(prefix="htam-cand-") as tmp:
            _pipeline(req, rec, state, device, Path(tmp))
    except CandidateFailure as f:
        rec.fail(f.kind, f.excerpt, f.check)
        if f.max_abs_err is not None:
            rec.set(max_abs_err=f.max_abs_err, max_rel_err=f.max_rel_err)
    except HarnessFailure as e:
        rec.fail(ErrorKind.INFRA_ERROR, f"harness: {e}")
    except Exception as e:  # an error escaping our own code after the candidate ran
        kind = ErrorKind.INFRA_ERROR
        if device.type == "cuda" and ("CUDA error" in str(e) or type(e).__name__ == "AcceleratorError"):
            # an asynchronous fault of a candidate kernel surfacing in our sync
            kind = ErrorKind.RUNTIME_ERROR
        # torch.OutOfMemoryError stays INFRA_ERROR (evaluation.md pitfall 19, as for candidate code in
        # execution.classify): with evaluations sharing a GPU it says more about the machine than the candidate.
        rec.fail(kind, exception_excerpt(e))
    tinyout.finish(rec, state.trial_context)
    rec.set(wall_s=time.perf_counter() - start)
    result: EvalResult = rec.result()
    return result


class _Phases:
    """Wall time per pipeline phase, recorded as the `phase_s` info entry (read back by `recorder.phase_seconds`)."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.times: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.times[name] = self.times.get(name, 0.0) + time.perf_counter() - start
            self.rec.info("phase_s", ", ".join(f"{k} {v:.3f}" for k, v in self.times.items()))


class _Waits:
    """Forwards gpulock's "queued" / "admitted" events and records the time spent waiting for the GPU as the
    `queued_s` info entry: the total, the number of waits, and the seconds per kind ("memory" budget, "shared"
    lock, "timing" lock), e.g. `21.890 in 6 waits: memory 10.100, shared 3.190, timing 8.600`. A phase's wall
    time in `phase_s` includes its waits: on a shared bench GPU, `timing` minus the timing-lock wait is the timed
    loop itself."""

    def __init__(self, forward: Callable[[str], None], rec: Recorder) -> None:
        self.forward = forward
        self.rec = rec
        self.since: float | None = None
        self.total = 0.0
        self.count = 0
        self.by_kind: dict[str, float] = {}

    def __call__(self, event: str, kind: str) -> None:
        if event == "queued":
            self.since = time.perf_counter()
        elif event == "admitted" and self.since is not None:
            waited = time.perf_counter() - self.since
            self.total += waited
            self.count += 1
            self.by_kind[kind] = self.by_kind.get(kind, 0.0) + waited
            self.since = None
            kinds = ", ".join(f"{k} {v:.3f}" for k, v in self.by_kind.items())
            self.rec.info("queued_s", f"{self.total:.3f} in {self.count} waits: {kinds}")
        self.forward(event)


def _pipeline(req: EvalRequest, rec: Recorder, state: WorkerState, device: torch.device, tmp: Path) -> None:
    if device.type == "cuda" and not torch.cuda.is_available():
        raise HarnessFailure("device=cuda requested but CUDA is not available in the worker")
    phase = _Phases(rec)
    _static(req, rec)
    with phase("variants"):
        variants = _variants(req)
    rec.set(shape_variant=_variant_label(req.shape, variants[0]))
    task = _load_task(req, variants[0])
    # Bench workers can share a GPU: reserve this evaluation's device memory before the candidate is even imported,
    # then do device work under the GPU's shared lock; `timed.time_and_recheck` takes the exclusive lock for the
    # timed loop, so no other worker's kernels run inside a timed window (gpulock.py). Waiting for any of these is
    # not candidate time: gpulock tells state.progress "queued" / "admitted" around each wait, and the evaluator
    # stops the request's clock in between.
    need = sharing.memory_need_bytes(task) if device.type == "cuda" else 0
    waits = _Waits(state.progress, rec)
    with gpulock.wait_listener(waits), gpulock.memory_budget(device.index or 0, need):
        _admitted(req, rec, state, device, tmp, phase, variants, task, need)


def _admitted(
    req: EvalRequest,
    rec: Recorder,
    state: WorkerState,
    device: torch.device,
    tmp: Path,
    phase: _Phases,
    variants: list[dict[str, Any]],
    task: types.ModuleType,
    need: int,
) -> None:
    guards.pin_precision(req.precision_policy)
    t0 = time.perf_counter()
    with phase("import"):
        candidate, cand_file = load_candidate(req.candidate_source, tmp, variants[0])
    import_s = time.perf_counter() - t0
    ctx = TrialContext(
        device, req.precision_policy, rec.rtol, rec.atol, req.candidate_kind == "kernel",
        state.counter, state.identities, cand_file,
    )  # fmt: skip
    state.trial_context = ctx
    # compile_s: the candidate's import (load_inline builds) plus its first forward (Triton JIT compiles).
    ctx.on_first_call = lambda first_s: rec.set(compiled=True, compile_s=import_s + first_s)
    verify_guards(ctx)  # the import itself must not have patched timers or flipped TF32
    with sharing.shared(device):
        ref, cand, weights_note = build_models(task, candidate, trial_seed(req, 0, 0), device, cand_file)
        rec.info("weights", weights_note)
        with phase("correctness"):
            with phase("correctness.tiny_output"):
                tinyout.prepare(req, rec, ctx, task, ref)  # a tiny reference output: scaled tolerance
            # Shapes in increasing input size: the candidate's first call is at the smallest shape, so a kernel
            # that remembers its first call's size (and clips later calls to it) fails a later, larger shape,
            # and one that bakes in the main shape fails the extra one (on the GPU extra variants are smaller
            # than the default sizes, on the CPU larger than smoke sizes).
            # (sub-phases "correctness.*" break the total down; they are part of it, not added to it)
            smaller, larger = _split_by_size(req, task, variants[1:])
            with phase("correctness.extra_shapes"):
                _extra_shapes(req, rec, ctx, candidate, smaller, cand_file)
                sharing.release_cache(device)
            with phase("correctness.trials"):
                outcomes = [run_trial(ctx, task, ref, cand, trial_seed(req, 0, 0), "trial 1")]
                for t in range(1, tinyout.main_trials(req, ctx)):
                    later = run_trial(ctx, task, ref, cand, trial_seed(req, 0, t), f"trial {t + 1}")
                    # only the first trial's inputs and output are checked again (degeneracy): holding every
                    # trial's would multiply the device memory by the number of trials
                    outcomes.append(dataclasses.replace(later, inputs=[], ref_out=None))
                _record_errors(rec, outcomes)
                sharing.release_cache(device)
            with phase("correctness.extra_shapes"):
                _extra_shapes(req, rec, ctx, candidate, larger, cand_file, first=len(smaller) + 1)
            with phase("correctness.task_configs"):
                _task_configs(req, rec, ctx, candidate, variants[0], cand_file)
            with phase("correctness.rerun"):
                output_checks.deterministic_rerun(req, rec, ctx, task, ref, cand)
            with phase("correctness.degeneracy"):
                output_checks.degeneracy(rec, ctx, outcomes)
        del outcomes
        sharing.release_cache(device)
    time_and_recheck(req, rec, ctx, task, ref, cand, phase)
    if device.type == "cuda":
        rec.info(
            "device_memory",
            f"peak allocated {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB, peak reserved "
            f"{torch.cuda.max_memory_reserved(device) / 2**30:.2f} GiB; reserved in the budget "
            f"{need / 2**30:.2f} GiB",
        )
    rec.ok(
        "correctness",
        f"{ctx.poisoned_trials} trials (main, extra shapes, recheck) within rtol={rec.rtol:g} atol={rec.atol:g}",
    )
    rec.ok("inputs_unchanged", f"{ctx.poisoned_trials} calls on cloned inputs")
    rec.ok("plain_tensor_output", "plain torch.Tensor, own storage, no input aliasing")
    rec.ok(
        "reference_kept_alive_and_poisoned",
        f"{ctx.poisoned_trials} calls, NaN poison {ctx.poison_bytes >> 20} MiB",
    )
    verify_guards(ctx)
    rec.ok("tf32_pinned_off", f"{req.precision_policy.value}: {guards.precision_state()}")
    rec.ok("timer_identity")
    rec.ok("harness_identity")
    if ctx.require_kernel:
        rec.ok(
            "kernel_launched",
            f"every call launched ≥1 kernel (min {min(ctx.launches)}, triton {state.counter.triton}, cuda {state.counter.cuda})",
        )
    else:
        rec.skip("kernel_launched", "reference track (request.candidate_kind=reference)")
    rec.set(correct=True)


def _record_errors(rec: Recorder, outcomes: list[TrialOutcome]) -> None:
    rec.set(
        max_abs_err=max(o.max_abs_err for o in outcomes),
        max_rel_err=max(o.max_rel_err for o in outcomes),
    )


def _split_by_size(
    req: EvalRequest, main_task: types.ModuleType, extras: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Extra variants with smaller inputs than the main variant (run before the main trials) and the rest."""
    main = sharing.input_elements(main_task)
    smaller: list[dict[str, Any]] = []
    larger: list[dict[str, Any]] = []
    for overrides in extras:
        n = sharing.input_elements(_load_task(req, overrides))
        (smaller if 0 <= n < main else larger).append(overrides)
    return smaller, larger


def _extra_shapes(
    req: EvalRequest,
    rec: Recorder,
    ctx: TrialContext,
    candidate: types.ModuleType,
    extras: list[dict[str, Any]],
    cand_file: str,
    first: int = 1,
) -> None:
    """Trials at the extra variants (numbered from `first`); called before and after the main trials."""
    if req.extra_shapes == 0:
        rec.skip("extra_shapes", "request.extra_shapes=0")
        return
    if not extras:
        if "extra_shapes" not in rec.checks:
            rec.skip("extra_shapes", "the task has no other valid size to try")
        return
    earlier = rec.checks.get("extra_shapes", "")
    labels = [earlier.removeprefix("pass: ")] if earlier.startswith("pass") else []
    for v, overrides in enumerate(extras, start=first):
        label = _variant_label(req.shape, overrides)
        task = _load_task(req, overrides)
        with temporary_globals(candidate, overrides), attributed("extra_shapes"):
            ref, cand, _ = build_models(task, candidate, trial_seed(req, v, 0), ctx.device, cand_file)
            for t in range(min(_EXTRA_TRIALS, req.trials)):
                run_trial(ctx, task, ref, cand, trial_seed(req, v, t), f"extra shape {label}")
        labels.append(label)
    rec.ok("extra_shapes", "; ".join(labels))


def _task_configs(
    req: EvalRequest,
    rec: Recorder,
    ctx: TrialContext,
    candidate: types.ModuleType,
    main: dict[str, Any],
    cand_file: str,
) -> None:
    """Every configuration the task declares (Robust-KBench's input/init/shape configurations) must pass too."""
    try:
        configs = declared_configurations(req.task_source, req.shape, main, req.task_key)
    except TaskError as e:
        raise HarnessFailure(f"task configurations of {req.task_key}: {e}") from e
    if not configs:
        rec.skip("task_configs", "the task declares no other configuration")
        return
    for v, (name, overrides) in enumerate(configs, start=1):
        task = _load_task(req, overrides)
        # At the smoke shape the configuration runs shrunk: say at which sizes.
        at = "" if req.shape == "default" else f" at {_variant_label(req.shape, overrides)}"
        with temporary_globals(candidate, overrides), attributed("task_configs"):
            ref, cand, _ = build_models(task, candidate, trial_seed(req, 50 + v, 0), ctx.device, cand_file)
            for t in range(min(_EXTRA_TRIALS, req.trials)):
                run_trial(ctx, task, ref, cand, trial_seed(req, 50 + v, t), f"config {name}{at}")
    rec.ok("task_configs", f"{len(configs)} configurations: " + "; ".join(name for name, _ in configs))
