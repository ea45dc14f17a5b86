"""Normalise one traced forward (a torch.fx GraphModule) into the typed op graph (`htam_graph.rules.ops`).

Every call is normalised to a canonical op: function, method and module calls share one name map
(`ops.SIGNATURES`, `ops.MODULE_OPS`) and one argument binder; `getitem` / `.values` of a min/max over a dim
and `.T` / `.mT` are understood. Anything not in the tables (control flow, unknown ops or modules) makes the
task not applicable, with the reason: the rules never guess. Size reads, view / reshape / permute and slicing
become STRUCTURAL size nodes and LAYOUT nodes (reshapes.py). One view idiom is folded:
`x.view(b, c, -1)` -> softmax over the flattened dim -> view back to x's shape is folded into one softmax over
x's trailing dims (views.py).
"""

from __future__ import annotations

import operator
from typing import Any

from htam_graph.rules.analysis.adaptive import adaptive_pool_node, is_adaptive_pool
from htam_graph.rules.analysis.calls import call_node, callable_name
from htam_graph.rules.analysis.casts import is_noop_cast
from htam_graph.rules.analysis.constants import inline_trace_constants
from htam_graph.rules.analysis.decompose import decompose_calls
from htam_graph.rules.analysis.functional import functional_norm_node, is_functional_norm
from htam_graph.rules.analysis.reshapes import (
    check_parts_call,
    check_shape_read,
    is_in_place,
    is_layout_call,
    is_part_item,
    is_parts_call,
    is_shape_read,
    is_transpose_attr,
    layout_node,
    mutated_tensor,
    part_node,
    transpose_node,
)
from htam_graph.rules.analysis.structural import (
    cat_node,
    check_total_scan_loss,
    int_node,
    int_valued,
    refined_kind,
)
from htam_graph.rules.analysis.views import FlattenedSoftmax, find_flattened_softmaxes
from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import (
    IGNORED_KWARGS,
    MODULE_OPS,
    SIGNATURES,
    AttrScalar,
    Const,
    OpGraph,
    OpKind,
    OpNode,
    Ref,
    Signature,
    TensorInfo,
    Value,
    number,
)

__all__ = ["normalise"]


def normalise(gm: Any, with_shapes: bool) -> OpGraph:
    """The op graph of a traced module (shapes from ShapeProp when `with_shapes`). Raises NotApplicable."""
    inline_trace_constants(gm)  # `torch.tensor(c)` in forward: a number, not an attribute (constants.py)
    decompose_calls(gm)  # F.normalize, torch.linalg.vector_norm: the ops they are defined by (decompose.py)
    names: dict[Any, str] = {}
    inputs: list[TensorInfo] = []
    attrs: dict[str, TensorInfo] = {}
    nodes: list[OpNode] = []
    output: Ref | None = None
    folds = find_flattened_softmaxes(gm, with_shapes)
    folded = {n for fold in folds.values() for n in fold.absorbed} - set(folds)
    for fx_node in gm.graph.nodes:
        if fx_node in folded:
            continue  # part of a flatten -> softmax -> unflatten pattern (views.py)
        if fx_node in folds:
            node = _flattened_softmax_node(gm, folds[fx_node], names, attrs, with_shapes)
            names[fx_node] = node.name
            nodes.append(node)
        elif fx_node.op == "placeholder":
            names[fx_node] = str(fx_node.target)
            shape, dtype = _meta(fx_node, with_shapes)
            inputs.append(TensorInfo(str(fx_node.target), "input", shape, dtype, len(inputs)))
        elif fx_node.op == "get_attr":
            names[fx_node] = str(fx_node.target)
            attrs[str(fx_node.target)] = _attr_info(gm, str(fx_node.target))
        elif fx_node.op == "output":
            value = _value(fx_node.args[0], names)
            if not isinstance(value, Ref):
                raise NotApplicable("the forward does not return a single tensor")
            output = value
        elif is_shape_read(fx_node):
            check_shape_read(fx_node)  # each item read becomes a size node (reshapes.py)
        elif is_parts_call(fx_node):
            check_parts_call(fx_node)  # each item taken becomes a `part` node (reshapes.py)
        elif is_noop_cast(fx_node, with_shapes):
            names[fx_node] = names[fx_node.args[0]]  # `x.float()` on float32: x itself (casts.py)
        elif _is_values_getitem(fx_node):
            names[fx_node] = names[fx_node.args[0]]  # `torch.min(x, dim)[0]`: the reduction node itself
        elif is_transpose_attr(fx_node):
            node = transpose_node(fx_node, _value(fx_node.args[0], names), _meta(fx_node, with_shapes))
            names[fx_node] = node.name
            nodes.append(node)
        elif _is_min_max_over_dim(fx_node):
            node = _values_reduction(fx_node, names, with_shapes)
            names[fx_node] = node.name
            nodes.append(node)
        else:
            node = _call_node(gm, fx_node, names, attrs, with_shapes)
            names[fx_node] = node.name
            nodes.append(node)
            if is_in_place(fx_node):
                names[mutated_tensor(fx_node)] = (
                    node.name
                )  # `out.mul_(s)`: later reads of `out` read the result
    if output is None:
        raise NotApplicable("the forward returns nothing")
    return OpGraph(tuple(inputs), tuple(attrs.values()), tuple(nodes), output)


def _flattened_softmax_node(
    gm: Any, fold: FlattenedSoftmax, names: dict[Any, str], attrs: dict[str, TensorInfo], with_shapes: bool
) -> OpNode:
    """The softmax of the fold, bound as written but reading the unflattened source over the tuple of dims."""
    import dataclasses

    names[fold.softmax.args[0]] = names[fold.source]  # the flatten view is the source, reshaped
    node = _call_node(gm, fold.softmax, names, attrs, with_shapes)
    shape, dtype = _meta(fold.unflatten, with_shapes)
    params = tuple((k, Const(fold.dims) if k == "dim" else v) for k, v in node.params)
    origin = (
        f"{node.origin} over dims {fold.dims} of {names[fold.source]} (flattened by a view, then viewed back)"
    )
    return dataclasses.replace(node, params=params, shape=shape, dtype=dtype, origin=origin)


def _meta(fx_node: Any, with_shapes: bool) -> tuple[tuple[int, ...], str]:
    if not with_shapes:
        return (), ""
    meta = fx_node.meta.get("tensor_meta")
    if meta is None or not hasattr(meta, "shape"):
        raise NotApplicable(
            f"{fx_node.name} is not a tensor (non-tensor inputs or outputs are not supported)"
        )
    return tuple(int(s) for s in meta.shape), str(meta.dtype)


def _attr_info(gm: Any, path: str) -> TensorInfo:
    import torch

    try:
        value = gm.get_parameter(path)
        kind = "param"
    except AttributeError:
        value = _get_path(gm, path)
        kind = "buffer"
    if not isinstance(value, torch.Tensor):
        raise NotApplicable(f"attribute {path} is not a tensor")
    return TensorInfo(path, kind, tuple(int(s) for s in value.shape), str(value.dtype))


def _get_path(root: Any, path: str) -> Any:
    obj = root
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _value(arg: Any, names: dict[Any, str]) -> Value:
    import torch.fx

    if isinstance(arg, torch.fx.Node):
        return Ref(names[arg])
    if arg is None or isinstance(arg, bool | int | float | str):
        return Const(arg)
    if isinstance(arg, tuple | list) and all(isinstance(a, bool | int | float) for a in arg):
        return Const(tuple(arg))
    raise NotApplicable(f"unsupported argument {arg!r} ({type(arg).__name__})")


def _call_node(
    gm: Any, fx_node: Any, names: dict[Any, str], attrs: dict[str, TensorInfo], with_shapes: bool
) -> OpNode:
    if int_valued(fx_node):
        return int_node(fx_node, lambda a: _value(a, names))
    shape, dtype = _meta(fx_node, with_shapes)
    if is_adaptive_pool(fx_node, gm):
        return adaptive_pool_node(gm, fx_node, lambda a: _value(a, names), shape, dtype)
    if is_layout_call(fx_node):
        return layout_node(fx_node, lambda a: _value(a, names), shape, dtype)
    if is_part_item(fx_node):
        return part_node(fx_node, lambda a: _value(a, names), shape, dtype)
    if fx_node.op == "call_module":
        return _module_node(gm, fx_node, names, attrs, shape, dtype)
    if is_functional_norm(fx_node):
        return functional_norm_node(fx_node, lambda a: _value(a, names), shape, dtype)
    name = callable_name(fx_node)
    if name is not None and _signature_or_none(fx_node) is None:
        return call_node(fx_node, lambda a: _value(a, names), shape, dtype, name)  # kept as called (calls.py)
    if fx_node.op == "call_function":
        sig = _function_signature(fx_node.target)
        origin = f"{getattr(fx_node.target, '__module__', None) or 'torch'}.{fx_node.target.__name__}"
        args = list(fx_node.args)
    elif fx_node.op == "call_method":
        method = str(fx_node.target)
        found = SIGNATURES.get(method.rstrip("_")) if method != "where" else None  # x.where(c, y) differs
        if found is None:
            raise NotApplicable(f"unsupported tensor method .{method}()")
        sig = found
        origin = f"Tensor.{method}"
        args = list(fx_node.args)
    else:
        raise NotApplicable(f"unsupported fx node {fx_node.op}")
    if sig.op == "cat":
        return cat_node(fx_node, lambda a: _value(a, names), shape, dtype, origin)
    operands, params = _bind(
        sig, [_value(a, names) for a in args], {k: _value(v, names) for k, v in fx_node.kwargs.items()}
    )
    _check_semantics(sig, operands, params)
    kind = refined_kind(sig, params)
    return OpNode(fx_node.name, kind, sig.op, operands, params, shape, dtype, None, origin)


def _signature_or_none(fx_node: Any) -> Signature | None:
    """The op-table entry of a function or method call, None when the tables do not know it."""
    if fx_node.op == "call_method":
        return SIGNATURES.get(str(fx_node.target).rstrip("_"))
    try:
        return _function_signature(fx_node.target)
    except NotApplicable:
        return None


def _is_min_max_over_dim(fx_node: Any) -> bool:
    (
        """`torch.min(x, dim)` / `x.max(dim, keepdim)`: a (values, indices) reduction, """
        """not the elementwise form."""
    )
    import torch

    if fx_node.op == "call_function":
        if fx_node.target is not torch.min and fx_node.target is not torch.max:
            return False
    elif fx_node.op != "call_method" or fx_node.target not in ("min", "max"):
        return False
    dim = fx_node.args[1] if len(fx_node.args) > 1 else fx_node.kwargs.get("dim")
    return isinstance(dim, int) and not isinstance(dim, bool)


def _is_values_getitem(fx_node: Any) -> bool:
    return (_is_getitem_zero(fx_node) or _is_values_attr(fx_node)) and _is_min_max_over_dim(fx_node.args[0])


def _is_getitem_zero(fx_node: Any) -> bool:
    return fx_node.op == "call_function" and fx_node.target is operator.getitem and fx_node.args[1] == 0


def _is_values_attr(fx_node: Any) -> bool:
    """`torch.max(x, dim).values` (traced as getattr(node, "values"))."""
    import builtins

    return (
        fx_node.op == "call_function" and fx_node.target is builtins.getattr and fx_node.args[1] == "values"
    )


def _values_reduction(fx_node: Any, names: dict[Any, str], with_shapes: bool) -> OpNode:
    """`torch.min(x, dim, keepdim)[0]` as an amin/amax reduction (same values; the indices are never read)."""
    kind = "min" if (getattr(fx_node.target, "__name__", fx_node.target) == "min") else "max"
    users = list(fx_node.users)
    if not users or any(not (_is_getitem_zero(u) or _is_values_attr(u)) for u in users):
        raise NotApplicable(
            f"torch.{kind}(x, dim) is used as a (values, indices) tuple, which is not a tensor;"
            " only its values `[0]` are supported"
        )
    sig = SIGNATURES[f"a{kind}"]
    operands, params = _bind(
        sig,
        [_value(a, names) for a in fx_node.args],
        {k: _value(v, names) for k, v in fx_node.kwargs.items()},
    )
    shape, dtype = _meta(users[0], with_shapes)
    origin = f"torch.{kind}(dim)[0]"
    return OpNode(fx_node.name, OpKind.REDUCTION, sig.op, operands, params, shape, dtype, None, origin)


def _function_signature(target: Any) -> Signature:
    (
        """Functions are recognised only when they ARE torch.<name>, """
        """torch.nn.functional.<name> or operator.<name>."""
    )
    import torch
    import torch.nn.functional as F

    name = getattr(target, "__name__", "")
    owners = (torch, F, operator, torch.special)
    if not any(getattr(owner, name, None) is target for owner in owners):
        # exported under another name than its own (F.logsigmoid is torch._C._nn.log_sigmoid)
        name = next((n for owner in owners for n, v in vars(owner).items() if v is target), "")
    if not name:
        raise NotApplicable(f"unsupported function {target!r}")
    sig = SIGNATURES.get(name)
    if sig is None:
        raise NotApplicable(f"unsupported op {name}")
    return sig


def _module_node(
    gm: Any,
    fx_node: Any,
    names: dict[Any, str],
    attrs: dict[str, TensorInfo],
    shape: tuple[int, ...],
    dtype: str,
) -> OpNode:
    path = str(fx_node.target)
    module = gm.get_submodule(path)
    cls = type(module)
    entry = MODULE_OPS.get(cls.__name__)
    if entry is None or not cls.__module__.startswith("torch.nn.modules"):
        raise NotApplicable(f"unsupported submodule {path} ({cls.__module__}.{cls.__name__})")
    op, attr_names = entry
    if SIGNATURES[op].kind is OpKind.LOSS:
        return _loss_module_node(fx_node, module, names, shape, dtype, op, attr_names)
    if fx_node.kwargs or len(fx_node.args) != 1:
        raise NotApplicable(f"submodule {path} is called with more than one argument")
    origin = f"nn.{cls.__name__} {path}"
    operands: tuple[Value, ...] = (_value(fx_node.args[0], names),)
    if SIGNATURES[op].kind in (OpKind.LIBRARY, OpKind.NORM):
        for pname in ("weight", "bias"):
            tensor = getattr(module, pname, None)
            if tensor is None:
                operands += (Const(None),)
                continue
            attrs[f"{path}.{pname}"] = _attr_info(gm, f"{path}.{pname}")
            operands += (Ref(f"{path}.{pname}"),)
        if SIGNATURES[op].kind is OpKind.LIBRARY:
            return OpNode(fx_node.name, OpKind.LIBRARY, op, operands, (), shape, dtype, path, origin)
    params = tuple((a, _module_scalar(module, path, a)) for a in attr_names)
    sig = SIGNATURES[op]
    _check_semantics(sig, operands, params)
    return OpNode(fx_node.name, sig.kind, op, operands, params, shape, dtype, path, origin)


def _loss_module_node(
    fx_node: Any,
    module: Any,
    names: dict[Any, str],
    shape: tuple[int, ...],
    dtype: str,
    op: str,
    attr_names: tuple[str, ...],
) -> OpNode:
    """A loss module called as `self.loss(input, target)`: the functional loss's node, its parameters read
    from the module (the others at the function's defaults); class weights are not supported."""
    path = str(fx_node.target)
    if fx_node.kwargs or len(fx_node.args) != 2:
        raise NotApplicable(f"loss module {path} is not called as {path}(input, target)")
    if getattr(module, "weight", None) is not None:
        raise NotApplicable(f"{op}: class weights ({path}.weight) are not supported")
    sig = SIGNATURES[op]
    operands = tuple(_value(a, names) for a in fx_node.args)
    params = tuple(
        (p, _module_scalar(module, path, p) if p in attr_names else Const(default))
        for p, default in sig.params
    )
    _check_semantics(sig, operands, params)
    origin = f"nn.{type(module).__name__} {path}"
    return OpNode(fx_node.name, OpKind.LOSS, op, operands, params, shape, dtype, path, origin)


def _module_scalar(module: Any, path: str, attr: str) -> Value:
    value = getattr(module, attr)
    if isinstance(value, float) and not isinstance(value, bool):
        return AttrScalar(f"{path}.{attr}", value)
    return Const(value)


def _bind(
    sig: Signature, args: list[Value], kwargs: dict[str, Value]
) -> tuple[tuple[Value, ...], tuple[tuple[str, Value], ...]]:
    slots = [*sig.operands, *(p for p, _ in sig.params)]
    if len(args) > len(slots):
        raise NotApplicable(f"{sig.op}: unexpected extra positional arguments")
    bound: dict[str, Value] = dict(zip(slots, args, strict=False))
    fixed = dict(sig.fixed)
    for key, value in kwargs.items():
        if key in IGNORED_KWARGS:
            continue
        if key in fixed:
            if not (isinstance(value, Const) and value.value == fixed[key]):
                raise NotApplicable(f"{sig.op}: {key}={value} is not supported")
            continue
        if key not in slots or key in bound:
            raise NotApplicable(f"{sig.op}: unsupported keyword argument {key}")
        bound[key] = value
    required = len(sig.operands) - sig.optional_operands
    operands: list[Value] = []
    for i, slot in enumerate(sig.operands):
        if slot not in bound and i < required:
            raise NotApplicable(f"{sig.op}: missing operand {slot}")
        operands.append(bound.get(slot, Const(None)))
    params = tuple((p, bound.get(p, Const(default))) for p, default in sig.params)
    return tuple(operands), params


def _check_semantics(
    sig: Signature, operands: tuple[Value, ...], params: tuple[tuple[str, Value], ...]
) -> None:
    """Reject calls whose name is elementwise but whose arguments make them something else."""
    # (a number as the second operand is an inlined 0-d tensor constant, `torch.min(x, torch.tensor(c))`: that
    # is elementwise; an int dim never gets here, `_is_min_max_over_dim` took it)
    if sig.op in ("max", "min") and not isinstance(operands[1], Ref) and number(operands[1]) is None:
        raise NotApplicable(
            f"torch.{sig.op}(x, {operands[1]}) is a reduction over a dimension, not elementwise"
        )
    if sig.kind is OpKind.SOFTMAX and dict(params)["dim"] == Const(None):
        raise NotApplicable(f"{sig.op} without an explicit dim")
    check_total_scan_loss(sig, params)
