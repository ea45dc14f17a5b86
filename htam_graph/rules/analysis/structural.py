"""Analysis of the forms the loss and scan recipes need: full reductions, losses, sizes, narrow / select /
cat.

Kept apart from `normalise.py` (which calls these while normalising each fx node):
- `torch.mean(x)` / `x.sum()` without a dim become TOTAL nodes (a 0-d result over every element);
- functional losses keep their `reduction` as a parameter (legacy `size_average` / `reduce` / `weight`
reject); - `x.size(d)` and Python arithmetic on sizes become int-valued STRUCTURAL nodes, decided from the
  graph alone (the attribute-marking trace has no shapes, and both traces must give the same node kinds);
- `torch.cat((a, b), d)` gets its tensors as operands.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from htam_graph.rules.analysis.reshapes import is_shape_item, shape_item_node
from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import Const, OpKind, OpNode, Signature, Value, number

__all__ = [
    "NO_DIM",
    "TOTAL_OPS",
    "cat_node",
    "check_total_scan_loss",
    "int_node",
    "int_valued",
    "refined_kind",
]

TOTAL_OPS = ("sum", "mean")
# reductions over every element kept as REDUCTION nodes with dim None (the composed kernels reduce all dims)
WHOLE_TENSOR_OPS = ("var", "std", "norm")
NO_DIM = (Const(None), Const(()))
ValueOf = Callable[[Any], Value]  # converts one fx argument (analysis._value bound to the node names)


def refined_kind(sig: Signature, params: tuple[tuple[str, Value], ...]) -> OpKind:
    """sum / mean without a dim reduce every element: a TOTAL (0-d result), not a reduction over dims."""
    if sig.kind is OpKind.REDUCTION and sig.op in TOTAL_OPS and dict(params)["dim"] in NO_DIM:
        return OpKind.TOTAL
    return sig.kind


def int_valued(fx_node: Any) -> bool:
    (
        """`x.size(d)` and Python arithmetic on such sizes (decided from the graph alone, """
        """with or without shapes)."""
    )
    import torch.fx

    if (fx_node.op == "call_method" and fx_node.target == "size") or is_shape_item(fx_node):
        return True
    name = getattr(fx_node.target, "__name__", "")
    if fx_node.op != "call_function" or getattr(operator, name, None) is not fx_node.target:
        return False
    nodes = [a for a in fx_node.args if isinstance(a, torch.fx.Node)]
    return bool(nodes) and all(int_valued(a) for a in nodes)


def int_node(fx_node: Any, value: ValueOf) -> OpNode:
    """A size read or integer arithmetic on sizes (STRUCTURAL, shape (), dtype "int")."""
    if is_shape_item(fx_node):
        return shape_item_node(fx_node, value)
    args = [value(a) for a in fx_node.args]
    if fx_node.op == "call_method":  # x.size(dim)
        dim = args[1] if len(args) > 1 else value(fx_node.kwargs.get("dim"))
        if len(args) > 2 or set(fx_node.kwargs) - {"dim"} or number(dim) is None:
            raise NotApplicable("x.size() without a single dim (a torch.Size) is not supported")
        params = (("dim", dim),)
        return OpNode(
            fx_node.name, OpKind.STRUCTURAL, "size", (args[0],), params, (), "int", None, "Tensor.size"
        )
    name = fx_node.target.__name__
    if fx_node.kwargs:
        raise NotApplicable(f"integer {name} with keyword arguments")
    origin = f"operator.{name}"
    return OpNode(fx_node.name, OpKind.STRUCTURAL, f"int_{name}", tuple(args), (), (), "int", None, origin)


def cat_node(fx_node: Any, value: ValueOf, shape: tuple[int, ...], dtype: str, origin: str) -> OpNode:
    """torch.cat(tensors, dim): the tensors become the operands."""
    import torch.fx

    kwargs = dict(fx_node.kwargs)
    args = list(fx_node.args)
    tensors = args[0] if args else kwargs.pop("tensors", None)
    dim = args[1] if len(args) > 1 else kwargs.pop("dim", 0)
    if kwargs or len(args) > 2 or not isinstance(tensors, tuple | list):
        raise NotApplicable("torch.cat with arguments other than (tensors, dim)")
    if not all(isinstance(t, torch.fx.Node) for t in tensors):
        raise NotApplicable("torch.cat of something other than tensors")
    params = (("dim", value(dim)),)
    if number(params[0][1]) is None:
        raise NotApplicable("torch.cat with a dim that is not a number")
    operands = tuple(value(t) for t in tensors)
    return OpNode(fx_node.name, OpKind.STRUCTURAL, "cat", operands, params, shape, dtype, None, origin)


def check_total_scan_loss(sig: Signature, params: tuple[tuple[str, Value], ...]) -> None:
    """Reject full reductions, scans and losses whose arguments the recipes do not reproduce."""
    values = dict(params)
    if sig.kind is OpKind.REDUCTION and values["dim"] in NO_DIM:
        if sig.op not in (*TOTAL_OPS, *WHOLE_TENSOR_OPS):
            raise NotApplicable(f"{sig.op} without an explicit dim (a full reduction) is not supported")
        if values["keepdim"] != Const(False):
            raise NotApplicable(f"{sig.op} over every element with keepdim is not supported")
    if sig.kind is OpKind.SCAN and number(values["dim"]) is None:
        raise NotApplicable(f"{sig.op} without a numeric dim")
    if sig.kind is OpKind.LOSS:
        check_loss(sig, params)


def check_loss(sig: Signature, params: tuple[tuple[str, Value], ...]) -> None:
    """Legacy arguments must be None and the reduction one the loss recipe knows."""
    values = dict(params)
    for legacy in ("size_average", "reduce", "weight"):
        if values.get(legacy, Const(None)) != Const(None):
            raise NotApplicable(f"{sig.op}: {legacy}={values[legacy]} is not supported")
    reduction = values["reduction"]
    allowed = ("mean", "sum", "none", "batchmean") if sig.op == "kl_div" else ("mean", "sum", "none")
    if not (isinstance(reduction, Const) and reduction.value in allowed):
        raise NotApplicable(f"{sig.op}: reduction={reduction} is not supported")
    if sig.op == "cross_entropy":
        _check_cross_entropy(values)


def _check_cross_entropy(values: dict[str, Value]) -> None:
    """Class-index cross-entropy as PyTorch computes it by default: no label smoothing, ignore_index -100
    (rows whose target is -100 add nothing and are not counted)."""
    if values["ignore_index"] != Const(-100):
        raise NotApplicable(
            f"cross_entropy: ignore_index={values['ignore_index']} is not supported (only -100)"
        )
    if number(values["label_smoothing"]) != 0:
        raise NotApplicable(f"cross_entropy: label_smoothing={values['label_smoothing']} is not supported")
