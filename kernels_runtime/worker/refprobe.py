"""Runs a task's reference once (CPU or the meta device) to validate a shape variant and measure its cost.

Used by `shapes` to pick smoke sizes: a variant is valid when `Model(*get_init_inputs())(*get_inputs())`
runs without error and returns non-empty, finite tensors. A constant output is reported separately: a
correctness check against a constant proves little, so the shape search prefers a variant that varies.
`meta_forward` is the one run of a task on the meta device, shared with `sharing`'s GPU memory sizing.
"""

from __future__ import annotations

import contextlib
import logging
import time
import types
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from htam_graph.kernels_runtime.worker.taskmod import OverrideValue, load_task_module

log = logging.getLogger(__name__)

_RETIME_S = 0.05

__all__ = [
    "ProbeResult",
    "MetaEstimate",
    "MetaRun",
    "build_meta_inputs",
    "probe_cpu",
    "estimate_meta",
    "meta_forward",
]


@dataclass(frozen=True)
class ProbeResult:
    """One CPU run of the reference at a shape variant."""

    ok: bool
    reason: str = ""  # why it is not ok (error excerpt or degenerate output)
    constant_output: bool = False
    build_s: float = 0.0
    forward_s: float = 0.0
    input_numel: int = 0
    output_numel: int = 0
    flops: int = 0  # matmul/conv FLOPs of the forward (FlopCounterMode), what an interpreted kernel pays for
    # elements of the largest tensor an op of the forward allocated (not a view): what an interpreted kernel
    # over an intermediate (a norm after an upsampling conv-transpose, say) pays for, input caps aside
    largest_intermediate: int = 0


@dataclass(frozen=True)
class MetaEstimate:
    """Sizes of a variant computed on the meta device (no memory, no arithmetic)."""

    ok: bool
    input_numel: int = 0
    param_numel: int = 0
    output_numel: int = 0
    flops: int = 0
    forward_ok: bool = False  # False when the meta forward failed (sizes then exclude the output)
    meta_unsupported: bool = False  # the failure was a missing meta kernel, not a shape error
    reason: str = ""


@dataclass(frozen=True)
class MetaRun:
    """A task's Model and inputs built, and optionally its forward run, on the meta device (no data)."""

    model: Any = None  # Model(*get_init_inputs()); None when that raised
    inputs: list[Any] | None = None  # get_inputs(); None when that raised
    build_error: Exception | None = None  # the first failure of Model(...) or get_inputs()
    forward_error: Exception | None = None  # no meta kernel for some op, or a shape error
    forward_ok: bool = False  # the forward ran to completion (output and flops are set only then)
    output: Any = None
    flops: int = 0  # matmul/conv FLOPs of the forward, counted only with `count_flops`


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".splitlines()[0] if str(e) else type(e).__name__
    return text[:300]


def _check_output(out: Any) -> tuple[str, bool]:
    """('' or why the output is degenerate, whether every output tensor is constant)."""
    tensors = list(_tensors(out))
    if not tensors:
        return "the forward returned no tensor", False
    if any(t.numel() == 0 for t in tensors):
        return "the forward returned an empty tensor", False
    floats = [t for t in tensors if t.is_floating_point() or t.is_complex()]
    if any(not bool(torch.isfinite(t).all()) for t in floats):
        return "the forward returned NaN or Inf", False
    total = sum(t.numel() for t in tensors)
    constant = total > 1 and all(bool((t == t.reshape(-1)[0]).all()) for t in tensors)
    return "", constant


def probe_cpu(source: str, name: str, overrides: Mapping[str, OverrideValue], seed: int = 0) -> ProbeResult:
    """Build the reference at `overrides` on the CPU, run one forward under `no_grad`, and judge the output."""
    with warnings.catch_warnings():
        # The task's own warnings (deprecated arguments, nested-tensor hints) say nothing about the variant.
        warnings.simplefilter("ignore")
        return _probe_cpu(source, name, overrides, seed)


def _probe_cpu(source: str, name: str, overrides: Mapping[str, OverrideValue], seed: int) -> ProbeResult:
    start = time.perf_counter()
    try:
        module = load_task_module(source, name, overrides)
        torch.manual_seed(seed)
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
    except Exception as e:  # any failure of the task's own code is a verdict on this variant
        return ProbeResult(False, f"build failed: {_short(e)}", build_s=time.perf_counter() - start)
    build_s = time.perf_counter() - start
    input_numel = sum(t.numel() for t in _tensors(inputs))
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    largest = _LargestAllocation()
    start = time.perf_counter()
    try:
        with torch.no_grad(), counter, largest:
            out = model(*inputs)
        forward_s = time.perf_counter() - start
        if forward_s > _RETIME_S:
            # One more run: the first pays one-off set-up, and a shared CPU makes single timings noisy.
            start = time.perf_counter()
            with torch.no_grad():
                model(*inputs)
            forward_s = min(forward_s, time.perf_counter() - start)
    except Exception as e:
        return ProbeResult(False, f"forward failed: {_short(e)}", build_s=build_s, input_numel=input_numel)
    reason, constant = _check_output(out)
    output_numel = sum(t.numel() for t in _tensors(out))
    flops = int(counter.get_total_flops())
    return ProbeResult(
        not reason, reason, constant, build_s, forward_s, input_numel, output_numel, flops, largest.numel
    )


class _LargestAllocation(TorchDispatchMode):
    """Records the element count of the largest tensor an op returns in fresh storage (views of an argument,
    such as a weight's transpose, do not count)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch's TorchDispatchMode is not annotated
        self.numel = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        given = {_storage(t) for t in _tensors([args, kwargs])}
        for tensor in _tensors(out):
            if _storage(tensor) not in given:
                self.numel = max(self.numel, tensor.numel())
        return out


def _storage(tensor: torch.Tensor) -> int | None:
    """The address of a tensor's storage (None for a tensor without one, which then counts as fresh)."""
    try:
        return int(tensor.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return None


def meta_forward(task: types.ModuleType, *, forward: bool = True, count_flops: bool = False) -> MetaRun:
    """Build the task's `Model(*get_init_inputs())` and `get_inputs()` on the meta device and, with `forward`,
    run one forward there under `no_grad` (FLOPs counted by FlopCounterMode with `count_flops`).

    Nothing is allocated and nothing computed, so default sizes are safe. The task's own failures are
    returned, not raised; the inputs are built even when the model fails, so a caller can still size them.
    The task's warnings (deprecated arguments, nested-tensor hints) say nothing about sizes and are silenced.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, inputs, build_error = _meta_build(task)
        if build_error is not None or inputs is None or not forward:
            return MetaRun(model, inputs, build_error)
        return _run_meta_forward(model, inputs, count_flops)


def _meta_build(task: types.ModuleType) -> tuple[Any, list[Any] | None, Exception | None]:
    model: Any = None
    error: Exception | None = None
    try:
        with torch.device("meta"):
            model = task.Model(*task.get_init_inputs())
    except Exception as e:  # .item() while building, say: the model cannot exist without data
        error = e
    inputs, inputs_error = build_meta_inputs(task)
    return model, inputs, error or inputs_error


def build_meta_inputs(task: types.ModuleType) -> tuple[list[Any] | None, Exception | None]:
    """`get_inputs()` on the meta device (no memory, no time): (the inputs, None), or (None, why it failed)."""
    try:
        with torch.device("meta"):
            return list(task.get_inputs()), None
    except Exception as e:  # a task that builds inputs some other way: size unknown
        return None, e


def _run_meta_forward(model: Any, inputs: list[Any], count_flops: bool) -> MetaRun:
    from torch.utils.flop_counter import FlopCounterMode

    try:
        counter = FlopCounterMode(display=False) if count_flops else None
        counting = counter if counter is not None else contextlib.nullcontext()
        # Under the meta device too: a tensor the forward creates without a device must not be allocated.
        with torch.device("meta"), torch.no_grad(), counting:
            output = model(*inputs)
    except Exception as e:
        return MetaRun(model, inputs, forward_error=e)
    flops = int(counter.get_total_flops()) if counter is not None else 0
    return MetaRun(model, inputs, forward_ok=True, output=output, flops=flops)


def estimate_meta(
    source: str, name: str, overrides: Mapping[str, OverrideValue], forward: bool = True
) -> MetaEstimate:
    """Sizes and matmul/conv FLOPs of a variant, computed on the meta device (safe for default sizes).

    With `forward=False` only the inputs and parameters are sized (fast; the meta forward of a recurrent
    model steps through every time step in Python and can take tens of seconds).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _estimate_meta(source, name, overrides, forward)


def _estimate_meta(
    source: str, name: str, overrides: Mapping[str, OverrideValue], forward: bool
) -> MetaEstimate:
    try:
        run = meta_forward(load_task_module(source, name, overrides), forward=forward, count_flops=True)
    except Exception as e:  # the task's module body raised, or an override names no constant
        run = MetaRun(build_error=e)
    if run.build_error is not None:
        return MetaEstimate(False, reason=f"build failed on meta: {_short(run.build_error)}")
    input_numel = sum(t.numel() for t in _tensors(run.inputs))
    model = run.model
    param_numel = sum(p.numel() for p in model.parameters()) if isinstance(model, torch.nn.Module) else 0
    if not forward:
        return MetaEstimate(True, input_numel, param_numel)
    if run.forward_error is not None:
        log.debug("meta forward of %s failed: %s", name, _short(run.forward_error))
        return MetaEstimate(
            True,
            input_numel,
            param_numel,
            meta_unsupported=isinstance(run.forward_error, NotImplementedError),
            reason=f"forward failed on meta: {_short(run.forward_error)}",
        )
    output_numel = sum(t.numel() for t in _tensors(run.output))
    return MetaEstimate(True, input_numel, param_numel, output_numel, run.flops, True)
