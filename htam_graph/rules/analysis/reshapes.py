"""Size reads and the views they feed: `x.shape[i]`, `b, c, h, w = x.shape`, `x.view(b, c // 4, 4, h, w)`,
`x.reshape(b, -1, self.dim)`, `x.permute(0, 2, 3, 1)` and slicing such as `x[..., :n]`.

- A shape read (`x.shape`, `x.size()`) is not a value of the op graph: each of its items becomes a `size` node
  (STRUCTURAL, dtype "int", as `x.size(i)` is), so sizes stay symbolic and the generated forward reads them
  from its tensors at run time (a view written for one input size is right at every other).
- `view` / `reshape` become one LAYOUT node `reshape` whose operands are the tensor and then each entry of the
  target shape: a size node, integer arithmetic on sizes, a number or a model attribute (an operand, so the
  attribute-marking trace can find `self.dim` there).
- `permute` becomes a LAYOUT node with its dims as a parameter.
- Indexing a tensor with slices / `...` / `None` / ints becomes a LAYOUT node `index`: its parameter is the
  subscript written with `{k}` for the k-th bound, the bounds (numbers or size nodes) are its operands.
- `a, b = x.chunk(2, dim=1)` (or torch.chunk / split with an int size): the call is not a value; each item
  taken from it becomes a LAYOUT node `part` (operands: the tensor, then the count or size and the dim).

The composed path keeps all of them as PyTorch calls (compose/torch_calls.py).
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Callable
from typing import Any

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import Const, OpKind, OpNode, Value

__all__ = [
    "check_parts_call",
    "check_shape_read",
    "is_in_place",
    "is_layout_call",
    "is_part_item",
    "is_parts_call",
    "is_shape_item",
    "is_shape_read",
    "is_transpose_attr",
    "layout_node",
    "mutated_tensor",
    "part_node",
    "shape_item_node",
    "transpose_node",
]

ValueOf = Callable[[Any], Value]
_RESHAPES = ("view", "reshape")
_PARTS = ("chunk", "split")


def is_shape_read(fx_node: Any) -> bool:
    """`x.shape` (getattr) or `x.size()` without a dim: a whole torch.Size."""
    if fx_node.op == "call_function" and fx_node.target is builtins.getattr:
        return len(fx_node.args) == 2 and fx_node.args[1] == "shape"
    return (
        fx_node.op == "call_method"
        and fx_node.target == "size"
        and len(fx_node.args) == 1
        and not (fx_node.kwargs)
    )


def is_shape_item(fx_node: Any) -> bool:
    """`x.shape[i]` with a constant int i (also what unpacking `b, c = x.shape` traces to)."""
    return _item_of(fx_node, is_shape_read) and type(fx_node.args[1]) is int


def _item_of(fx_node: Any, source: Callable[[Any], bool]) -> bool:
    """`v[...]` where v is an fx node for which `source` holds."""
    import torch.fx

    return (
        fx_node.op == "call_function"
        and fx_node.target is operator.getitem
        and isinstance(fx_node.args[0], torch.fx.Node)
        and source(fx_node.args[0])
    )


def check_shape_read(fx_node: Any) -> None:
    """A shape read is only supported when every use takes one item of it."""
    if not all(is_shape_item(user) for user in fx_node.users):
        raise NotApplicable(f"{fx_node.name}: a torch.Size used other than item by item is not supported")


def shape_item_node(fx_node: Any, value: ValueOf) -> OpNode:
    """`x.shape[i]` as the size node `x.size(i)`."""
    source = value(fx_node.args[0].args[0])
    params = (("dim", Const(fx_node.args[1])),)
    return OpNode(fx_node.name, OpKind.STRUCTURAL, "size", (source,), params, (), "int", None, "Tensor.shape")


def is_layout_call(fx_node: Any) -> bool:
    """view / reshape / permute (method or torch function), or a tensor indexed with slices."""
    import torch

    if fx_node.op == "call_method":
        return fx_node.target in (*_RESHAPES, "permute")
    if fx_node.op != "call_function":
        return False
    if fx_node.target in (torch.reshape, torch.permute):
        return True
    return fx_node.target is operator.getitem and _is_subscript(fx_node.args[1])


def layout_node(fx_node: Any, value: ValueOf, shape: tuple[int, ...], dtype: str) -> OpNode:
    """The LAYOUT node of a view / reshape / permute / slicing call (see the module docstring)."""
    import torch

    if fx_node.kwargs:
        raise NotApplicable(f"{fx_node.name}: keyword arguments to a view are not supported")
    source, *rest = fx_node.args
    operand = value(source)
    if fx_node.target is operator.getitem:
        template, bounds = _subscript(rest[0], value)
        return _node(fx_node, "index", (operand, *bounds), (("index", Const(template)),), shape, dtype)
    entries = _flat(rest)
    if fx_node.target in ("permute", torch.permute):
        dims = [value(e) for e in entries]
        if not all(isinstance(d, Const) and type(d.value) is int for d in dims):
            raise NotApplicable(f"{fx_node.name}: permute with dims that are not numbers")
        params = (("dims", Const(tuple(d.value for d in dims))),)  # type: ignore[union-attr]
        return _node(fx_node, "permute", (operand,), params, shape, dtype)
    return _node(fx_node, "reshape", (operand, *(value(e) for e in entries)), (), shape, dtype)


def _node(
    fx_node: Any,
    op: str,
    operands: tuple[Value, ...],
    params: tuple[tuple[str, Value], ...],
    shape: tuple[int, ...],
    dtype: str,
) -> OpNode:
    origin = f"Tensor.{fx_node.target}" if fx_node.op == "call_method" else f"torch.{op}"
    return OpNode(fx_node.name, OpKind.LAYOUT, op, operands, params, shape, dtype, None, origin)


def _flat(args: list[Any]) -> list[Any]:
    """`f(a, b)` and `f((a, b))` alike: the entries."""
    if len(args) == 1 and isinstance(args[0], tuple | list):
        return list(args[0])
    return list(args)


def _is_subscript(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, slice) or i is Ellipsis or i is None for i in items)


def _subscript(index: Any, value: ValueOf) -> tuple[str, list[Value]]:
    """`[..., :{0}]` and its bounds: every int index and slice bound is an operand."""
    bounds: list[Value] = []

    def bound(item: Any) -> str:
        if item is None:
            return ""
        bounds.append(value(item))
        return "{" + str(len(bounds) - 1) + "}"

    parts = []
    for item in index if isinstance(index, tuple) else (index,):
        if item is Ellipsis:
            parts.append("...")
        elif item is None:
            parts.append("None")
        elif isinstance(item, slice):
            text = f"{bound(item.start)}:{bound(item.stop)}"
            parts.append(text + (f":{bound(item.step)}" if item.step is not None else ""))
        else:
            parts.append(bound(item))
    return "[" + ", ".join(parts) + "]", bounds


def is_parts_call(fx_node: Any) -> bool:
    """`x.chunk(n, dim)` / `torch.chunk` / `x.split(size, dim)` / `torch.split`: a tuple of tensors."""
    import torch

    if fx_node.op == "call_method":
        return fx_node.target in _PARTS
    return fx_node.op == "call_function" and fx_node.target in (torch.chunk, torch.split)


def check_parts_call(fx_node: Any) -> None:
    """Supported when every use takes one item and the count / size is a number (not a list of sizes)."""
    if not all(_is_item_of(user, fx_node) for user in fx_node.users):
        raise NotApplicable(f"{fx_node.name}: the parts of a chunk / split are only supported item by item")
    if len(fx_node.args) < 2 or isinstance(fx_node.args[1], tuple | list):
        raise NotApplicable(f"{fx_node.name}: a split into a list of sizes is not supported")
    if set(fx_node.kwargs) - {"dim"}:
        raise NotApplicable(f"{fx_node.name}: chunk / split with arguments other than (count, dim)")


def part_node(fx_node: Any, value: ValueOf, shape: tuple[int, ...], dtype: str) -> OpNode:
    """`x.chunk(n, d)[i]` as a LAYOUT node `part` (see the module docstring)."""
    call = fx_node.args[0]
    dim = call.args[2] if len(call.args) > 2 else call.kwargs.get("dim", 0)
    name = str(call.target) if call.op == "call_method" else call.target.__name__
    operands = (value(call.args[0]), value(call.args[1]), value(dim))
    params = (("call", Const(name)), ("item", Const(fx_node.args[1])))
    return OpNode(fx_node.name, OpKind.LAYOUT, "part", operands, params, shape, dtype, None, f"torch.{name}")


def is_part_item(fx_node: Any) -> bool:
    """`parts[i]` of a chunk / split call."""
    return _item_of(fx_node, is_parts_call)


def _is_item_of(user: Any, call: Any) -> bool:
    return is_part_item(user) and user.args[0] is call and type(user.args[1]) is int


def is_transpose_attr(fx_node: Any) -> bool:
    """`w.T` (traced as getattr(node, "T")): a view; ShapeProp has checked it is the 2-d transpose."""
    return fx_node.op == "call_function" and fx_node.target is builtins.getattr and fx_node.args[1] == "T"


def transpose_node(fx_node: Any, operand: Value, meta: tuple[tuple[int, ...], str]) -> OpNode:
    """`w.T` as the LAYOUT node `t` (`meta`: the result's shape and dtype, () and "" without shapes)."""
    shape, dtype = meta
    if shape and len(shape) != 2:
        raise NotApplicable(f"{fx_node.name}: .T of a tensor that is not 2-d")
    return OpNode(fx_node.name, OpKind.LAYOUT, "t", (operand,), (), shape, dtype, None, "Tensor.T")


def is_in_place(fx_node: Any) -> bool:
    """`out.mul_(s)`: a tensor method that writes its first operand."""
    target = str(fx_node.target)
    return fx_node.op == "call_method" and target.endswith("_") and not target.startswith("_")


def mutated_tensor(fx_node: Any) -> Any:
    """The tensor an in-place method writes (later reads of it read the method's result); one that is, or has,
    a view is not supported: the write would change that view too."""
    import torch.fx

    mutated = fx_node.args[0]
    if not isinstance(mutated, torch.fx.Node):
        raise NotApplicable(f"{fx_node.name}: an in-place op on a constant")
    viewed = [u for u in mutated.users if u is not fx_node and (is_layout_call(u) or is_part_item(u))]
    if is_layout_call(mutated) or is_part_item(mutated) or viewed:
        raise NotApplicable(f"{fx_node.name}: an in-place op on a view or a viewed tensor is not supported")
    return mutated
