"""Runs a task's reference once (CPU or the meta device) to validate a shape variant and measure its cost.

Used by `shapes` to pick smoke sizes: a variant is valid when `Model(*get_init_inputs())(*get_inputs())`
runs without error and returns non-empty, finite tensors. A constant output is reported separately: a
correctness check against a constant proves little, so the shape search prefers a variant that varies.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from htam_graph.kernels_runtime.taskmod import OverrideValue, load_task_module

log = logging.getLogger(__name__)

_RETIME_S = 0.05

__all__ = ["ProbeResult", "MetaEstimate", "probe_cpu", "estimate_meta"]


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
    start = time.perf_counter()
    try:
        with torch.no_grad():
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
    return ProbeResult(not reason, reason, constant, build_s, forward_s, input_numel, output_numel)


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
    from torch.utils.flop_counter import FlopCounterMode

    try:
        module = load_task_module(source, name, overrides)
        with torch.device("meta"):
            model = module.Model(*module.get_init_inputs())
            inputs = module.get_inputs()
    except Exception as e:
        return MetaEstimate(False, reason=f"build failed on meta: {_short(e)}")
    input_numel = sum(t.numel() for t in _tensors(inputs))
    param_numel = sum(p.numel() for p in model.parameters()) if isinstance(model, torch.nn.Module) else 0
    if not forward:
        return MetaEstimate(True, input_numel, param_numel)
    try:
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            out = model(*inputs)
    except Exception as e:  # no meta kernel for some op, or a shape error
        log.debug("meta forward of %s failed: %s", name, _short(e))
        unsupported = isinstance(e, NotImplementedError)
        return MetaEstimate(
            True,
            input_numel,
            param_numel,
            meta_unsupported=unsupported,
            reason=f"forward failed on meta: {_short(e)}",
        )
    output_numel = sum(t.numel() for t in _tensors(out))
    return MetaEstimate(True, input_numel, param_numel, output_numel, int(counter.get_total_flops()), True)
