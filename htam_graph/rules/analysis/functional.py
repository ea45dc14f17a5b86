"""Functional norms whose torch signature interleaves tensors and options (so no `Signature` row binds them).

`F.layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5)` becomes a NORM node with op
`layer_norm` (not `nn_layer_norm`: there is no module, so recipes that read `self.<module>` never see it),
operands (input, weight, bias) and params (normalized_shape, eps).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import Const, OpKind, OpNode, Ref, Value

__all__ = ["functional_norm_node", "is_functional_norm"]

_LAYER_NORM_ARGS = ("input", "normalized_shape", "weight", "bias", "eps")


def is_functional_norm(fx_node: Any) -> bool:
    """`torch.nn.functional.layer_norm(...)` called as a function."""
    import torch.nn.functional as F

    return fx_node.op == "call_function" and fx_node.target is F.layer_norm


def functional_norm_node(
    fx_node: Any, value_of: Callable[[Any], Value], shape: tuple[int, ...], dtype: str
) -> OpNode:
    """The NORM node of an `F.layer_norm` call (see the module docstring). Raises NotApplicable."""
    if len(fx_node.args) > len(_LAYER_NORM_ARGS):
        raise NotApplicable("layer_norm: unexpected extra positional arguments")
    bound = dict(zip(_LAYER_NORM_ARGS, fx_node.args, strict=False))
    for key, value in fx_node.kwargs.items():
        if key not in _LAYER_NORM_ARGS or key in bound:
            raise NotApplicable(f"layer_norm: unsupported keyword argument {key}")
        bound[key] = value
    if "input" not in bound or "normalized_shape" not in bound:
        raise NotApplicable("layer_norm: missing input or normalized_shape")
    source = value_of(bound["input"])
    if not isinstance(source, Ref):
        raise NotApplicable("layer_norm of a constant")
    normalized = value_of(bound["normalized_shape"])
    dims = normalized.value if isinstance(normalized, Const) else None
    dims = (dims,) if isinstance(dims, int) and not isinstance(dims, bool) else dims
    if not (isinstance(dims, tuple) and dims and all(type(d) is int for d in dims)):
        raise NotApplicable(f"layer_norm: normalized_shape {normalized} is not a tuple of ints")
    affine = tuple(value_of(bound.get(name)) for name in ("weight", "bias"))
    if any(not isinstance(v, Ref) and v != Const(None) for v in affine):
        raise NotApplicable("layer_norm: weight / bias that are not tensors")
    eps = value_of(bound.get("eps", 1e-5))
    params = (("normalized_shape", Const(tuple(dims))), ("eps", eps))
    return OpNode(
        fx_node.name, OpKind.NORM, "layer_norm", (source, *affine), params, shape, dtype, None, "F.layer_norm"
    )
