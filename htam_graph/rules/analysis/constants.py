"""Tensor constants that torch.fx creates while tracing, made into numbers the generated code can carry.

A tensor built inside `forward` (`torch.min(x, torch.tensor(self.c))`), or computed there from a plain tensor
attribute, is not a parameter or buffer of the model: fx stores it on the traced module as
`_tensor_constant<i>` and reads it with a `get_attr` node. ModelNew copies the task's `__init__`, not its
forward, so it never has that attribute: code that read it would fail with `'ModelNew' object has no attribute
'_tensor_constant0'`.

A 0-d numeric constant with data is replaced, in every node that reads it, by its Python number (a float:
`torch.min(x, torch.tensor(2))` must stay the elementwise minimum, not become a reduction over dim 2). The
analysis's attribute markers then recognise one that came from a numeric model attribute, so the generated
code reads `self.c` at run time. Any other such constant (more than one element, or without data because the
model was built on the meta device) makes the task not applicable, with the reason: the rules never emit a
module that reads an attribute it does not define.
"""

from __future__ import annotations

import re
from typing import Any

from htam_graph.rules.base import NotApplicable

__all__ = ["inline_trace_constants", "is_trace_constant"]

_TRACE_CONSTANT = re.compile(r"_tensor_constant\d+")


def is_trace_constant(fx_node: Any) -> bool:
    """A `get_attr` of a tensor constant fx created while tracing (not an attribute of the task's model)."""
    return fx_node.op == "get_attr" and _TRACE_CONSTANT.fullmatch(str(fx_node.target)) is not None


def inline_trace_constants(gm: Any) -> None:
    """Replace every read of a 0-d numeric trace constant by its number, in place (see the module docstring).
    Raises NotApplicable for a trace constant that cannot be inlined."""
    for fx_node in list(gm.graph.nodes):
        if not is_trace_constant(fx_node):
            continue
        number = _number(getattr(gm, str(fx_node.target)), str(fx_node.target))
        for user in list(fx_node.users):
            user.args = _replaced(user.args, fx_node, number)
            user.kwargs = _replaced(user.kwargs, fx_node, number)
        gm.graph.erase_node(fx_node)


def _number(value: Any, name: str) -> float:
    import torch

    if not isinstance(value, torch.Tensor):
        raise NotApplicable(f"the traced constant {name} is not a tensor")
    if value.dim() != 0:
        raise NotApplicable(
            f"a tensor of shape {tuple(value.shape)} built inside forward ({name}): only 0-d "
            "constants are inlined"
        )
    if value.is_meta:
        raise NotApplicable(
            f"a 0-d tensor computed inside forward from a model attribute ({name}) has no value to inline"
        )
    if value.dtype == torch.bool or value.is_complex():
        raise NotApplicable(f"a {value.dtype} constant built inside forward ({name})")
    return float(value.item())


def _replaced(value: Any, old: Any, new: float) -> Any:
    if value is old:
        return new
    if isinstance(value, tuple):
        return tuple(_replaced(v, old, new) for v in value)
    if isinstance(value, list):
        return [_replaced(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _replaced(v, old, new) for k, v in value.items()}
    return value
