"""Ops the rules do not know, kept as the call the reference made: `torch.einsum("bij,bjk->bik", a, b)`,
`torch.flip(x, [1])`, `F.pad(x, (1, 1))`, `x.roll(1, 2)`.

A call of a function of torch, torch.nn.functional, torch.special or torch.linalg (or a tensor method) that
is not in the op tables becomes a CALL node, when it returns one tensor and its arguments are tensors, sizes,
numbers, strings, booleans, None or tuples of numbers. The node's `template` parameter is the argument list
with `{k}` for its k-th operand (tensors and numbers are operands, so the attribute-marking trace can find
`self.k` among them). Random ops and in-place methods are not kept (their result is not a function of the
arguments alone), nor are dtype casts (casts.py). Only recipes that keep calls accept a graph with a CALL
node (`PlannedRecipe.keeps_calls`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import Const, OpKind, OpNode, Value

__all__ = ["call_node", "callable_name"]

ValueOf = Callable[[Any], Value]
_RANDOM = ("rand", "dropout", "bernoulli", "multinomial", "normal", "poisson", "uniform", "empty")
# dtype changes: the fused kernels compute in fp32, so a cast is not a call to keep (casts.py decides)
_CASTS = (
    *("to", "type", "type_as", "double", "float", "half", "bfloat16"),
    *("int", "long", "short", "bool", "byte"),
)


def callable_name(fx_node: Any) -> str | None:
    """`torch.einsum`, `torch.nn.functional.pad`, `.roll` (a method): how the forward writes the call, or None
    when it is not a function of those namespaces (or is random / in place)."""
    import torch
    import torch.nn.functional as F

    if fx_node.op == "call_method":
        name = str(fx_node.target)
        found = None if name.endswith("_") or name.startswith("_") else f".{name}"
    elif fx_node.op == "call_function":
        name = getattr(fx_node.target, "__name__", "")
        owners = {"torch": torch, "torch.nn.functional": F, "torch.special": torch.special}
        owners["torch.linalg"] = torch.linalg
        found = next(
            (f"{k}.{name}" for k, v in owners.items() if getattr(v, name, None) is fx_node.target), None
        )
    else:
        return None
    if found is None or name in _CASTS or any(word in name for word in _RANDOM):
        return None
    return found


def call_node(fx_node: Any, value: ValueOf, shape: tuple[int, ...], dtype: str, name: str) -> OpNode:
    """The CALL node of `fx_node`, whose callable the forward writes as `name`."""
    operands: list[Value] = []

    def arg(item: Any) -> str:
        if isinstance(item, list | tuple):  # written as a tuple, each entry in its own right
            return "(" + "".join(f"{arg(i)}, " for i in item) + ")"
        bound = value(item)
        if isinstance(bound, Const) and not _is_number(bound.value):
            return repr(bound.value)
        operands.append(bound)
        return "{" + str(len(operands) - 1) + "}"

    try:
        parts = [arg(a) for a in fx_node.args] + [f"{k}={arg(v)}" for k, v in fx_node.kwargs.items()]
    except NotApplicable as e:
        raise NotApplicable(f"{name}: {e}") from e
    params = (("call", Const(name)), ("template", Const(", ".join(parts))))
    return OpNode(fx_node.name, OpKind.CALL, name, tuple(operands), params, shape, dtype, None, name)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
