"""Dtype casts that change nothing: `x.float()`, `y.type_as(x)`, `x.to(torch.float32)` on a tensor that
already has that dtype.

Functional task forms write them defensively (Robust-KBench's RMSNorm: `x.float()` before the statistics and
`.type_as(x)` after them), and on float32 inputs they are the identity, so the analysis reads through them:
the cast's value is its input's. A cast that changes the dtype stays unsupported (the rules never guess).
"""

from __future__ import annotations

from typing import Any

__all__ = ["is_noop_cast"]

_DTYPE_METHODS = frozenset({"float", "double", "half", "bfloat16"})  # x.float() & co: a cast to that dtype


def is_noop_cast(fx_node: Any, with_shapes: bool) -> bool:
    """Whether `fx_node` is a dtype cast of a traced tensor to its own dtype (always assumed without shapes:
    the marker trace only mirrors a graph whose casts were already checked with shapes)."""
    import torch.fx

    if fx_node.op != "call_method" or not _is_cast_call(fx_node):
        return False
    source = fx_node.args[0]
    if not isinstance(source, torch.fx.Node):
        return False
    if not with_shapes:
        return True
    before, after = source.meta.get("tensor_meta"), fx_node.meta.get("tensor_meta")
    return (
        before is not None
        and after is not None
        and getattr(before, "dtype", None) is not None
        and before.dtype == getattr(after, "dtype", None)
    )


def _is_cast_call(fx_node: Any) -> bool:
    import torch
    import torch.fx

    method, args, kwargs = str(fx_node.target), fx_node.args[1:], dict(fx_node.kwargs)
    if method in _DTYPE_METHODS:
        return not args and not kwargs
    if method == "type_as":
        return len(args) == 1 and isinstance(args[0], torch.fx.Node) and not kwargs
    if method in ("to", "type"):
        dtype = kwargs.pop("dtype", args[0] if len(args) == 1 else None)
        return isinstance(dtype, torch.dtype) and not kwargs and len(args) <= 1
    return False
