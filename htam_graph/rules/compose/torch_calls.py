"""The PyTorch expression of a stage kept as a call: library ops, pooling, views, dropout modules, size
reads and integer arithmetic on them, and torch.cat.

Library and pooling calls are written as the reference wrote them (library_epilogue._library_call: a module
call `self.conv(v)`, or the functional call with the same arguments); a conv / Linear whose bias moved into
the next kernel is called without it. Views are the torch functions of the same name; a view / reshape gets
its target shape from the forward's own size variables (`y.reshape(s0, s1 // 4, 4)`), so it holds at every
input size.
"""

from __future__ import annotations

from collections.abc import Callable

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpKind, OpNode, Ref, Value
from htam_graph.rules.recipes.elementwise.library_epilogue import _library_call

__all__ = ["StageCall", "tensor_expr", "torch_call"]

# How the composed forward writes a kept stage: (graph, node, variables of earlier nodes) -> an expression
StageCall = Callable[[OpGraph, OpNode, dict[str, str]], str]

_VIEWS = ("unsqueeze", "squeeze", "t", "diag", "flatten", "transpose")
_STRUCTURAL_CALLS = ("flip", "narrow", "select")
_INT_OPS = {"int_add": "+", "int_sub": "-", "int_mul": "*", "int_floordiv": "//", "int_mod": "%"}


def torch_call(graph: OpGraph, node: OpNode, computed: dict[str, str]) -> str:
    """The forward expression of `node` (with its comment); `computed` maps earlier nodes to the variables
    holding them."""
    if node.kind in (OpKind.LIBRARY, OpKind.POOL):
        return f"{_library_call(graph, node, computed)}  # PyTorch, unchanged"
    source = tensor_expr(graph, node.operands[0], computed)
    if node.kind is OpKind.RANDOM and node.module_path is not None:
        return f"self.{node.module_path}({source})  # PyTorch, unchanged"
    if node.kind is OpKind.CALL:
        return f"{_kept_call(graph, node, computed)}  # PyTorch, unchanged"
    if node.kind is OpKind.STRUCTURAL or node.op in ("reshape", "permute", "index", "part"):
        return f"{_shape_expr(graph, node, computed)}  # PyTorch, unchanged"
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


def _shape_expr(graph: OpGraph, node: OpNode, computed: dict[str, str]) -> str:
    """A size read, integer arithmetic on sizes, a reshape / permute / slicing view, or torch.cat."""
    if node.op == "cat":
        tensors = ", ".join(tensor_expr(graph, v, computed) for v in node.operands)
        return f"torch.cat(({tensors},), dim={_int_expr(node.param('dim'), computed)})"
    if node.op in _INT_OPS:
        left, right = (_int_expr(v, computed) for v in node.operands)
        return f"({left} {_INT_OPS[node.op]} {right})"
    if node.op == "int_neg":
        return f"(-{_int_expr(node.operands[0], computed)})"
    source = tensor_expr(graph, node.operands[0], computed)
    if node.op == "size":
        return f"{source}.size({_int_expr(node.param('dim'), computed)})"
    if node.op == "reshape":
        return f"{source}.reshape({', '.join(_int_expr(v, computed) for v in node.operands[1:])})"
    if node.op == "permute":
        return f"{source}.permute({_int_expr(node.param('dims'), computed)})"
    if node.op == "part":
        call, item = node.param("call"), node.param("item")
        count, dim = (_int_expr(v, computed) for v in node.operands[1:])
        return f"torch.{call.value}({source}, {count}, dim={dim})[{item.value}]"  # type: ignore[union-attr]
    if node.op == "index":
        template = node.param("index")
        assert isinstance(template, Const) and isinstance(template.value, str)
        return source + template.value.format(*(_int_expr(v, computed) for v in node.operands[1:]))
    if node.op in _STRUCTURAL_CALLS:  # torch.flip(x, dims=...), torch.narrow(x, dim=..., ...)
        params = ", ".join(f"{k}={_call_arg(graph, v, computed)}" for k, v in node.params)
        return f"torch.{node.op}({source}, {params})"
    raise NotApplicable(f"{node.op} ({node.origin}) has no PyTorch call in the composed forward")


def _int_expr(value: Value, computed: dict[str, str]) -> str:
    """An integer argument: a size variable of the forward, a model attribute or a literal."""
    if isinstance(value, Ref) and value.name in computed:
        return computed[value.name]
    if isinstance(value, AttrScalar) and type(value.value) is int:
        return f"self.{value.path}"
    if isinstance(value, Const) and (type(value.value) is int or _int_tuple(value.value)):
        return repr(value.value)
    raise NotApplicable(f"{value} is not an integer the composed forward can write")


def _int_tuple(value: object) -> bool:
    return isinstance(value, tuple) and all(type(v) is int for v in value)


def _kept_call(graph: OpGraph, node: OpNode, computed: dict[str, str]) -> str:
    """An op the rules do not know, written as the reference wrote it (analysis/calls.py)."""
    call, template = node.param("call").value, node.param("template").value  # type: ignore[union-attr]
    args = [_call_arg(graph, v, computed) for v in node.operands]
    written = str(template).format(*args)
    if str(call).startswith("."):  # a method: its first argument is the tensor
        receiver, _, rest = written.partition(", ")
        return f"{receiver}{call}({rest})"
    return f"{call}({written})"


def _call_arg(graph: OpGraph, value: Value, computed: dict[str, str]) -> str:
    if isinstance(value, Ref) and (value.name in computed or graph.tensor(value.name) is not None):
        return tensor_expr(graph, value, computed)
    if isinstance(value, AttrScalar):
        return f"self.{value.path}"
    return _int_expr(value, computed) if not isinstance(value, Const) else repr(value.value)
