"""Tracing a task's model with torch.fx, with two fallbacks for forwards plain symbolic tracing rejects.

1. Plain `torch.fx.symbolic_trace(model)`: what every KernelBench task gets (its graph is unchanged).
2. Forward parameters the task never passes (`get_inputs()` gives fewer values than `forward` takes) are bound
   to their defaults with `concrete_args`, exactly as the call `model(*inputs)` binds them. This is the
   `forward(self, x, fn=forward_fn)` pattern (Robust-KBench, KernelBench's functional variants): `fn` is the
   module-level function, which is then traced through.
3. Additionally, shape introspection (`t.shape`, `t.size()`, `t.dim()`, `t.ndim`, `len(t)`) is answered with
   the concrete sizes of the task's own (meta-device) inputs: every proxy carries its meta tensor, computed as
   tracing goes. Constants derived from those sizes are then specialised to the analysed configuration; the
   graph says so (`OpGraph.shape_specialised`) so that recipes never bake such a constant into a kernel that
   must work at other sizes.

The first stage that succeeds wins; when all fail, the reason is the plain trace's error.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from htam_graph.rules.base import NotApplicable

__all__ = ["Traced", "trace_model"]


@dataclass(frozen=True)
class Traced:
    """A traced model: the fx GraphModule and whether shape introspection was specialised to the inputs."""

    module: Any
    shape_specialised: bool = False


def trace_model(model: Any, inputs: list[Any]) -> Traced:
    """Trace `model` called as `model(*inputs)` (see the module docstring). Raises NotApplicable."""
    import torch.fx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fx deprecation chatter is not the task's problem
        try:
            return Traced(torch.fx.symbolic_trace(model))
        except Exception as e:
            first = e
        with _defaults_bound(model, len(inputs)) as bound:
            if bound:
                try:
                    return Traced(torch.fx.symbolic_trace(model))
                except Exception:  # noqa: S110 - the next stage may still trace it; the first error is reported
                    pass
            try:
                tracer = _ShapeTracer(inputs)
                graph = tracer.trace(model)
                return Traced(torch.fx.GraphModule(tracer.root, graph, type(model).__name__), True)
            except Exception:  # noqa: S110 - reported as the plain trace's error below
                pass
    raise NotApplicable(f"torch.fx cannot trace the forward ({type(first).__name__}: {first})") from first


@contextlib.contextmanager
def _defaults_bound(model: Any, n_inputs: int) -> Iterator[bool]:
    """While inside: `type(model).forward` takes only the `n_inputs` passed values and calls the task's
    forward with its other parameters at their defaults (True), or nothing changed (False: no such
    parameters).

    fx traces `type(root).forward` and cannot make a placeholder of a function default, so the model's class
    is swapped for a subclass with that narrower forward, and swapped back on exit.
    """
    cls = type(model)
    bound = _bound_class(cls, n_inputs)
    if bound is None:
        yield False
        return
    try:
        model.__class__ = bound
    except TypeError:  # layout differs (slots): cannot swap
        yield False
        return
    try:
        yield True
    finally:
        model.__class__ = cls


def _bound_class(cls: type, n_inputs: int) -> type | None:
    """The subclass whose forward takes the first `n_inputs` parameters (None: nothing to bind, or cannot)."""
    defaults = _unpassed_defaults(cls.forward, n_inputs)  # type: ignore[attr-defined]
    if not defaults:
        return None
    names = list(inspect.signature(cls.forward).parameters)[1 : n_inputs + 1]  # type: ignore[attr-defined]
    call = ", ".join(["self", *names, "**_htam_defaults"])
    source = f"def forward({', '.join(['self', *names])}):\n    return _htam_task_forward({call})\n"
    scope: dict[str, Any] = {"_htam_task_forward": cls.forward, "_htam_defaults": defaults}  # type: ignore[attr-defined]
    try:
        exec(compile(source, f"<{cls.__name__}.forward with defaults bound>", "exec"), scope)  # noqa: S102
        return type(cls.__name__, (cls,), {"forward": scope["forward"], "__module__": cls.__module__})
    except Exception:  # an exotic class (metaclass, slots): leave it to the plain trace's error
        return None


def _unpassed_defaults(forward: Any, n_inputs: int) -> dict[str, Any]:
    """The defaults of `forward(self, ...)`'s parameters after the first `n_inputs` positional ones ({} when
    there are none, or when a parameter is *args / **kwargs / keyword-only / required and unpassed)."""
    try:
        params = list(inspect.signature(forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return {}
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if len(params) < n_inputs or any(p.kind not in positional for p in params):
        return {}
    out: dict[str, Any] = {}
    for param in params[n_inputs:]:
        if param.default is inspect.Parameter.empty:
            return {}  # a required parameter the task does not pass: the call itself would fail
        out[param.name] = param.default
    return out


def _tracer_classes() -> tuple[type, type]:
    """(_ShapeProxy, _ShapeTracerBase) built lazily: torch is imported only when a trace is needed."""
    import torch
    import torch.fx

    class ShapeProxy(torch.fx.Proxy):
        """A proxy that knows its meta tensor, so shape questions get concrete answers."""

        meta_value: Any = None

        @property
        def shape(self) -> Any:
            if isinstance(self.meta_value, torch.Tensor):
                return self.meta_value.shape
            return self.tracer.create_proxy("call_function", getattr, (self, "shape"), {})

        @property
        def ndim(self) -> Any:
            if isinstance(self.meta_value, torch.Tensor):
                return self.meta_value.dim()
            return self.tracer.create_proxy("call_function", getattr, (self, "ndim"), {})

        def size(self, dim: int | None = None) -> Any:
            if isinstance(self.meta_value, torch.Tensor):
                return self.meta_value.size() if dim is None else self.meta_value.size(dim)
            args = (self,) if dim is None else (self, dim)
            return self.tracer.create_proxy("call_method", "size", args, {})

        def dim(self) -> Any:
            if isinstance(self.meta_value, torch.Tensor):
                return self.meta_value.dim()
            return self.tracer.create_proxy("call_method", "dim", (self,), {})

        def __len__(self) -> int:
            if isinstance(self.meta_value, torch.Tensor):
                return len(self.meta_value)
            return super().__len__()

    class ShapeTracerBase(torch.fx.Tracer):
        def __init__(self, inputs: list[Any]) -> None:
            super().__init__()
            self._inputs = list(inputs)
            self._placeholders = 0

        def proxy(self, node: Any) -> Any:
            return ShapeProxy(node, self)

        def create_proxy(self, kind: str, target: Any, args: Any, kwargs: Any, *rest: Any, **kw: Any) -> Any:
            proxy = super().create_proxy(kind, target, args, kwargs, *rest, **kw)
            if isinstance(proxy, ShapeProxy):
                proxy.meta_value = self._meta_of(kind, target, args, kwargs)
            return proxy

        def _meta_of(self, kind: str, target: Any, args: Any, kwargs: Any) -> Any:
            if kind == "placeholder":
                index, self._placeholders = self._placeholders, self._placeholders + 1
                return self._inputs[index] if index < len(self._inputs) else None
            try:
                margs = torch.fx.node.map_aggregate(args, _meta_arg)
                mkwargs = torch.fx.node.map_aggregate(kwargs, _meta_arg)
                if kind == "call_function":
                    return target(*margs, **mkwargs)
                if kind == "call_method":
                    return getattr(margs[0], target)(*margs[1:], **mkwargs)
                if kind == "call_module":
                    return self.root.get_submodule(target)(*margs, **mkwargs)
                if kind == "get_attr":  # not getattr(): the root's attribute access is patched while tracing
                    tensors = dict(self.root.named_parameters()) | dict(self.root.named_buffers())
                    return tensors.get(str(target))
            except _Unknown:
                return None
            except Exception:  # a meta kernel torch lacks: that value's shape just stays symbolic
                return None
            return None

    def _meta_arg(value: Any) -> Any:
        if isinstance(value, ShapeProxy):
            if value.meta_value is None:
                raise _Unknown
            return value.meta_value
        if isinstance(value, torch.fx.Proxy):
            raise _Unknown
        return value

    return ShapeProxy, ShapeTracerBase


class _Unknown(Exception):
    """An argument whose meta value is not known: the result's is not either."""


def _ShapeTracer(inputs: list[Any]) -> Any:  # noqa: N802 - reads as the class it builds
    _, base = _tracer_classes()
    return base(inputs)
