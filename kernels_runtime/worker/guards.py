"""Process-level guards the worker installs before the candidate is imported.

- precision pinning (pitfall 7): TF32 off and fp32 matmul precision 'highest' on both sides under fp32-strict,
  re-asserted before every reference call and verified after every candidate call;
- identity snapshots (pitfall 6): the timer functions and the comparison functions the harness relies on are
  recorded, and after the candidate ran each must still be the very same object;
- launch counters (pitfall 15): `JITFunction.run` (and the interpreter's `InterpretedFunction.run`) are
  wrapped to count Triton launches, and `torch.utils.cpp_extension.load_inline` is wrapped so that every function
  of an extension built from a source containing `__global__` counts its calls.

Limit (documented, not hidden): the candidate runs in this process and could undo any of it. The static checks
reject the ways to do so that we know of (assigning module attributes, setattr on modules, gc/ctypes/frames),
and the identity snapshot catches a patched guard object, but this is not a sandbox against code written to
attack this harness specifically.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from htam_graph.model import PrecisionPolicy

__all__ = ["LaunchCounter", "pin_precision", "precision_state", "precision_violation", "snapshot_identities"]


def pin_precision(policy: PrecisionPolicy) -> None:
    """Set the TF32 switches for the reference side: always fp32-exact (the reference is the ground truth)."""
    del policy  # the reference is computed strictly under every policy; the policy governs the candidate only
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def precision_state() -> dict[str, object]:
    """The current values of the switches that trade fp32 accuracy for speed."""
    return {
        "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def precision_violation(policy: PrecisionPolicy) -> str | None:
    """Why the current switches break `policy` (None: they respect it). Only fp32-strict forbids TF32."""
    if policy is not PrecisionPolicy.FP32_STRICT:
        return None
    state = precision_state()
    if (
        state["cuda.matmul.allow_tf32"]
        or state["cudnn.allow_tf32"]
        or state["float32_matmul_precision"] != "highest"
    ):
        return f"TF32 enabled under fp32-strict: {state}"
    return None


# Objects whose identity must not change: timers (timer_identity) and what the comparison uses (harness_identity).
_TIMERS: tuple[tuple[str, Callable[[], Any]], ...] = (
    ("time.perf_counter", lambda: time.perf_counter),
    ("time.perf_counter_ns", lambda: time.perf_counter_ns),
    ("time.time", lambda: time.time),
    ("time.monotonic", lambda: time.monotonic),
    ("torch.cuda.Event", lambda: torch.cuda.Event),
    ("torch.cuda.Event.record", lambda: torch.cuda.Event.record),
    ("torch.cuda.Event.elapsed_time", lambda: torch.cuda.Event.elapsed_time),
    ("torch.cuda.Event.synchronize", lambda: torch.cuda.Event.synchronize),
    ("torch.cuda.synchronize", lambda: torch.cuda.synchronize),
    ("torch.cuda.Stream.synchronize", lambda: torch.cuda.Stream.synchronize),
    ("torch.cuda._sleep", lambda: torch.cuda._sleep),  # the head start (timing_protocol.py)
    ("torch.profiler.profile", lambda: torch.profiler.profile),  # the stream audit (timing_protocol.py)
)
# (torch.manual_seed is not listed: importing torch._dynamo legitimately re-wraps it.)
_HARNESS: tuple[tuple[str, Callable[[], Any]], ...] = (
    ("torch.Tensor", lambda: torch.Tensor),
    ("torch.equal", lambda: torch.equal),
    ("torch.isfinite", lambda: torch.isfinite),
    ("torch.isnan", lambda: torch.isnan),
    ("torch.abs", lambda: torch.abs),
    ("torch.Tensor.clone", lambda: torch.Tensor.clone),
    ("torch.Tensor.float", lambda: torch.Tensor.float),
    ("torch.Tensor.sub", lambda: torch.Tensor.sub),
    ("torch.Tensor.__sub__", lambda: torch.Tensor.__sub__),
    ("torch.Tensor.abs", lambda: torch.Tensor.abs),
    ("torch.Tensor.max", lambda: torch.Tensor.max),
    ("torch.Tensor.all", lambda: torch.Tensor.all),
    ("torch.Tensor.item", lambda: torch.Tensor.item),
    ("torch.Tensor.__le__", lambda: torch.Tensor.__le__),
    ("torch.Tensor.__eq__", lambda: torch.Tensor.__eq__),
    ("torch.Tensor.copy_", lambda: torch.Tensor.copy_),
    ("torch.Tensor.fill_", lambda: torch.Tensor.fill_),
    ("torch.Tensor.data_ptr", lambda: torch.Tensor.data_ptr),
    ("torch.Tensor.untyped_storage", lambda: torch.Tensor.untyped_storage),
    ("torch.nn.Module.__call__", lambda: torch.nn.Module.__call__),
)


@dataclass(frozen=True)
class IdentitySnapshot:
    """Objects captured before the candidate was imported."""

    timers: dict[str, int]
    harness: dict[str, int]

    def changed(self, which: str) -> list[str]:
        """Names (of `which`: 'timers' or 'harness') whose object is no longer the captured one."""
        table = _TIMERS if which == "timers" else _HARNESS
        saved = self.timers if which == "timers" else self.harness
        return [name for name, get in table if id(_safe(get)) != saved[name]]


def _safe(get: Callable[[], Any]) -> Any:
    try:
        return get()
    except AttributeError:
        return None


def snapshot_identities() -> IdentitySnapshot:
    """Capture the ids of the timer and comparison objects. The objects themselves stay referenced by their
    modules, so an id cannot be recycled unless the attribute was replaced (which is what we detect)."""
    return IdentitySnapshot(
        timers={name: id(_safe(get)) for name, get in _TIMERS},
        harness={name: id(_safe(get)) for name, get in _HARNESS},
    )


@dataclass
class LaunchCounter:
    """Counts custom-kernel launches in this process (Triton JIT launches and calls into __global__ extensions)."""

    triton: int = 0
    cuda: int = 0
    cuda_extensions: list[str] = field(default_factory=list)
    installed: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.triton + self.cuda

    def install(self) -> None:
        """Wrap the launch entry points. Idempotent per process (the worker installs once)."""
        self._wrap_triton()
        self._wrap_load_inline()

    def _wrap_triton(self) -> None:
        try:
            from triton.runtime import jit as triton_jit
        except Exception:  # triton missing: no Triton candidate can launch anything anyway
            return
        classes: list[type] = [triton_jit.JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        except Exception:
            pass
        for cls in classes:
            original = getattr(cls, "run")  # noqa: B009 - cls is a plain `type` to the type checker
            if getattr(original, "_htam_counted", False):
                continue
            setattr(cls, "run", self._counting_triton(original))  # noqa: B010
            self.installed.append(f"{cls.__module__}.{cls.__qualname__}.run")

    def _counting_triton(self, original: Callable[..., Any]) -> Callable[..., Any]:
        counter = self

        @functools.wraps(original)
        def run(self_fn: Any, *args: Any, **kwargs: Any) -> Any:
            if not kwargs.get("warmup", False):
                counter.triton += 1
            return original(self_fn, *args, **kwargs)

        run._htam_counted = True  # type: ignore[attr-defined]
        return run

    def _wrap_load_inline(self) -> None:
        import torch.utils.cpp_extension as cpp_ext

        original: Callable[..., Any] = cpp_ext.load_inline
        if getattr(original, "_htam_counted", False):
            return
        counter = self

        @functools.wraps(original)
        def load_inline(*args: Any, **kwargs: Any) -> Any:
            module = original(*args, **kwargs)
            cuda_sources = kwargs.get("cuda_sources", args[2] if len(args) > 2 else None)
            text = (
                "\n".join(cuda_sources) if isinstance(cuda_sources, list | tuple) else str(cuda_sources or "")
            )
            if "__global__" in text:
                counter._count_calls_of(module)
            return module

        load_inline._htam_counted = True  # type: ignore[attr-defined]
        cpp_ext.load_inline = load_inline
        self.installed.append("torch.utils.cpp_extension.load_inline")

    def _count_calls_of(self, module: Any) -> None:
        """Replace each function of a freshly built extension module with a counting wrapper."""
        self.cuda_extensions.append(getattr(module, "__name__", "?"))
        for name in dir(module):
            fn = getattr(module, name)
            if name.startswith("_") or not callable(fn) or isinstance(fn, type):
                continue
            setattr(module, name, self._counting_cuda(fn))

    def _counting_cuda(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        counter = self

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            counter.cuda += 1
            return fn(*args, **kwargs)

        return call
