"""Adaptive pooling (`nn.AdaptiveAvgPoolNd` / `nn.AdaptiveMaxPoolNd` and their `F.*` forms) in the op graph.

- Output size 1 in every pooled dim: a mean / amax over the last N dims with keepdim (the same values), which
  the reductions fuse.
- Any other output size: a POOL node `adaptive_avg_poolNd` / `adaptive_max_poolNd` with its `output_size`,
  kept as the PyTorch call (`self.pool(x)` or `F.adaptive_avg_pool2d(x, output_size=...)`). Its windows
  depend on the input's size, so no recipe bakes them into a kernel: the pooling recipes fuse only the
  fixed-window `nn.*Pool` ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import Const, OpKind, OpNode, Value

__all__ = ["adaptive_pool_node", "is_adaptive_pool"]

ValueOf = Callable[[Any], Value]


def _kind_and_dims(fx_node: Any, gm: Any) -> tuple[str, int] | None:
    """("avg" | "max", N) for an adaptive pool call (module of torch.nn or function of F), else None."""
    import torch.nn.functional as F

    if fx_node.op == "call_module":
        cls = type(gm.get_submodule(str(fx_node.target)))
        name, owner = cls.__name__, cls.__module__
        if not owner.startswith("torch.nn.modules"):
            return None
    elif fx_node.op == "call_function":
        name = getattr(fx_node.target, "__name__", "")
        if getattr(F, name, None) is not fx_node.target:
            return None
    else:
        return None
    for kind in ("avg", "max"):
        for nd in (1, 2, 3):
            if name.replace("_", "").lower() == f"adaptive{kind}pool{nd}d":
                return kind, nd
    return None


def is_adaptive_pool(fx_node: Any, gm: Any) -> bool:
    """An adaptive average or max pooling call, as a module or a function."""
    return _kind_and_dims(fx_node, gm) is not None


def adaptive_pool_node(
    gm: Any, fx_node: Any, value_of: ValueOf, shape: tuple[int, ...], dtype: str
) -> OpNode:
    """The mean / amax or adaptive POOL node of the call (module docstring). Raises NotApplicable."""
    found = _kind_and_dims(fx_node, gm)
    assert found is not None, "adaptive_pool_node of a call is_adaptive_pool rejects"
    kind, nd = found
    source, output_size, origin = _call_parts(gm, fx_node, kind, nd)
    sizes = tuple(output_size) if isinstance(output_size, tuple | list) else (output_size,) * nd
    if len(sizes) != nd or not all(s is None or (isinstance(s, int) and s > 0) for s in sizes):
        raise NotApplicable(f"{origin}: output size {output_size} is not {nd} positive ints (or None)")
    operands = (value_of(source),)
    if all(s == 1 for s in sizes):  # (None keeps the input's size: not global)
        op = "mean" if kind == "avg" else "amax"
        over = (("dim", Const(tuple(range(-nd, 0)))), ("keepdim", Const(True)))
        return OpNode(fx_node.name, OpKind.REDUCTION, op, operands, over, shape, dtype, None, origin)
    module_path = str(fx_node.target) if fx_node.op == "call_module" else None
    params = (("output_size", Const(sizes)),)
    op = f"adaptive_{kind}_pool{nd}d"
    return OpNode(fx_node.name, OpKind.POOL, op, operands, params, shape, dtype, module_path, origin)


def _call_parts(gm: Any, fx_node: Any, kind: str, nd: int) -> tuple[Any, Any, str]:
    """(input node, output size, origin) of the call. (A call returning indices too gives a tuple, which the
    shape check rejects before this.)"""
    if fx_node.op == "call_module":
        module = gm.get_submodule(str(fx_node.target))
        if fx_node.kwargs or len(fx_node.args) != 1:
            raise NotApplicable(f"submodule {fx_node.target} is called with more than one argument")
        return fx_node.args[0], module.output_size, f"nn.{type(module).__name__} {fx_node.target}"
    names = ("input", "output_size", "return_indices")
    bound = dict(zip(names, fx_node.args, strict=False)) | dict(fx_node.kwargs)
    if set(bound) - set(names) or "output_size" not in bound:
        raise NotApplicable(f"F.adaptive_{kind}_pool{nd}d: only (input, output_size) is supported")
    return bound["input"], bound["output_size"], f"F.adaptive_{kind}_pool{nd}d"
