"""The PyTorch expression of a stage kept as a call: library ops, pooling, views and dropout modules.

Library and pooling calls are written as the reference wrote them (library_epilogue._library_call: a module
call `self.conv(v)`, or the functional call with the same arguments); a conv / Linear whose bias moved into
the next kernel is called without it. Views are the torch functions of the same name.
"""

from __future__ import annotations

from collections.abc import Callable

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import Const, OpGraph, OpKind, OpNode, Ref, Value
from htam_graph.rules.recipes.elementwise.library_epilogue import _library_call

__all__ = ["StageCall", "tensor_expr", "torch_call"]

# How the composed forward writes a kept stage: (graph, node, variables of earlier nodes) -> an expression
StageCall = Callable[[OpGraph, OpNode, dict[str, str]], str]

_VIEWS = ("unsqueeze", "squeeze", "t", "diag", "flatten", "transpose")


def torch_call(graph: OpGraph, node: OpNode, computed: dict[str, str]) -> str:
    """The forward expression of `node` (with its comment); `computed` maps earlier nodes to the variables
    holding them."""
    if node.kind in (OpKind.LIBRARY, OpKind.POOL):
        return f"{_library_call(graph, node, computed)}  # PyTorch, unchanged"
    source = tensor_expr(graph, node.operands[0], computed)
    if node.kind is OpKind.RANDOM and node.module_path is not None:
        return f"self.{node.module_path}({source})  # PyTorch, unchanged"
    if node.kind is OpKind.LAYOUT and node.op in _VIEWS:
        args = [source] + [
            repr(v.value) for _, v in node.params if isinstance(v, Const) and v.value is not None
        ]
        return f"torch.{node.op}({', '.join(args)})  # PyTorch, unchanged"
    raise NotApplicable(f"{node.op} ({node.origin}) has no PyTorch call in the composed forward")


def tensor_expr(graph: OpGraph, value: Value, computed: dict[str, str]) -> str:
    """How the forward names a tensor operand: an earlier node's variable, an input, or `self.<param>`."""
    if isinstance(value, Ref) and value.name in computed:
        return computed[value.name]
    if isinstance(value, Ref):
        info = graph.tensor(value.name)
        if info is not None:
            return info.name if info.kind == "input" else f"self.{info.name}"
    raise NotApplicable(f"unsupported operand {value}")
