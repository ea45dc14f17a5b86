"""Functional norms whose torch signature interleaves tensors and options (so no `Signature` row binds them).

Each row of `_FUNCTIONAL_NORMS` binds one `torch.nn.functional` norm called as a function to a NORM node of
the same shape as its module's: operands (input, weight, bias) with an absent affine tensor as `Const(None)`,
and the statistics' parameters under the module attribute names (normalized_shape / num_groups, eps). The op
is the function's name (`layer_norm`, not `nn_layer_norm`): there is no module, so recipes that read
`self.<module>` never see it.

- `F.layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5)`;
- `F.group_norm(input, num_groups, weight=None, bias=None, eps=1e-5)`;
- `F.rms_norm(input, normalized_shape, weight=None, eps=None)` (no bias; eps None: the dtype's epsilon);
- `F.instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
  momentum=0.1, eps=1e-5)` with the input's own statistics only: running statistics (which the call would
  update in place) or `use_input_stats=False` are not applicable; momentum then changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import Const, OpKind, OpNode, Ref, Value

__all__ = ["functional_norm_node", "is_functional_norm"]

ValueOf = Callable[[Any], Value]


@dataclass(frozen=True)
class _Row:
    """How one functional norm binds: its positional argument order, the arguments that must be given, the
    affine tensors (weight, bias: None when the function has no such argument), its parameters with their
    defaults, and the arguments that must keep one value."""

    op: str
    args: tuple[str, ...]
    required: tuple[str, ...]
    affine: tuple[str | None, str | None]
    params: tuple[tuple[str, object], ...]
    fixed: tuple[tuple[str, object], ...] = ()


_FUNCTIONAL_NORMS: dict[str, _Row] = {
    "layer_norm": _Row(
        "layer_norm",
        ("input", "normalized_shape", "weight", "bias", "eps"),
        ("input", "normalized_shape"),
        ("weight", "bias"),
        (("normalized_shape", None), ("eps", 1e-5)),
    ),
    "group_norm": _Row(
        "group_norm",
        ("input", "num_groups", "weight", "bias", "eps"),
        ("input", "num_groups"),
        ("weight", "bias"),
        (("num_groups", None), ("eps", 1e-5)),
    ),
    "rms_norm": _Row(
        "rms_norm",
        ("input", "normalized_shape", "weight", "eps"),
        ("input", "normalized_shape"),
        ("weight", None),
        (("normalized_shape", None), ("eps", None)),
    ),
    "instance_norm": _Row(
        "instance_norm",
        ("input", "running_mean", "running_var", "weight", "bias", "use_input_stats", "momentum", "eps"),
        ("input",),
        ("weight", "bias"),
        (("eps", 1e-5),),
        (("running_mean", None), ("running_var", None), ("use_input_stats", True)),
    ),
}
_IGNORED = {"instance_norm": ("momentum",)}  # what only the (rejected) running statistics would read


def _row_of(fx_node: Any) -> _Row | None:
    import torch.nn.functional as F

    if fx_node.op != "call_function":
        return None
    name = getattr(fx_node.target, "__name__", "")
    row = _FUNCTIONAL_NORMS.get(name)
    return row if row is not None and getattr(F, name, None) is fx_node.target else None


def is_functional_norm(fx_node: Any) -> bool:
    """A `torch.nn.functional` norm of `_FUNCTIONAL_NORMS` called as a function."""
    return _row_of(fx_node) is not None


def functional_norm_node(fx_node: Any, value_of: ValueOf, shape: tuple[int, ...], dtype: str) -> OpNode:
    """The NORM node of a functional norm call (see the module docstring). Raises NotApplicable."""
    row = _row_of(fx_node)
    assert row is not None, "functional_norm_node of a call is_functional_norm rejects"
    bound = _bind(row, fx_node)
    for name, value in row.fixed:
        if value_of(bound.get(name, value)) != Const(value):
            raise NotApplicable(f"{row.op}: {name}={value_of(bound[name])} is not supported (only {value})")
    source = value_of(bound["input"])
    if not isinstance(source, Ref):
        raise NotApplicable(f"{row.op} of a constant")
    params = tuple(
        (name, _param(row.op, name, value_of(bound.get(name, default)))) for name, default in row.params
    )
    affine = tuple(Const(None) if name is None else value_of(bound.get(name)) for name in row.affine)
    if any(not isinstance(v, Ref) and v != Const(None) for v in affine):
        raise NotApplicable(f"{row.op}: weight / bias that are not tensors")
    return OpNode(
        fx_node.name, OpKind.NORM, row.op, (source, *affine), params, shape, dtype, None, f"F.{row.op}"
    )


def _bind(row: _Row, fx_node: Any) -> dict[str, Any]:
    """The call's arguments by name (positional ones in the function's order), the required ones present."""
    if len(fx_node.args) > len(row.args):
        raise NotApplicable(f"{row.op}: unexpected extra positional arguments")
    bound = dict(zip(row.args, fx_node.args, strict=False))
    for key, value in fx_node.kwargs.items():
        if key not in row.args or key in bound:
            raise NotApplicable(f"{row.op}: unsupported keyword argument {key}")
        bound[key] = value
    for name in _IGNORED.get(row.op, ()):
        bound.pop(name, None)
    missing = [name for name in row.required if name not in bound]
    if missing:
        raise NotApplicable(f"{row.op}: missing {' or '.join(missing)}")
    return bound


def _param(op: str, name: str, value: Value) -> Value:
    """A parameter as the module's attribute of that name would hold it (normalized_shape: a tuple)."""
    if name == "normalized_shape":
        dims = value.value if isinstance(value, Const) else None
        dims = (dims,) if isinstance(dims, int) and not isinstance(dims, bool) else dims
        if not (isinstance(dims, tuple) and dims and all(type(d) is int for d in dims)):
            raise NotApplicable(f"{op}: normalized_shape {value} is not a tuple of ints")
        return Const(tuple(dims))
    if name == "num_groups" and not (isinstance(value, Const) and type(value.value) is int):
        raise NotApplicable(f"{op}: num_groups {value} is not an int")
    return value
