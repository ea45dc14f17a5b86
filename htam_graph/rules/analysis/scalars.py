"""Numeric model attributes among a traced forward's constants.

Scalars that came from numeric model attributes (`self.divisor`) are found by tracing a second copy whose
numeric attributes hold unique marker values: a constant that changes to a marker is that attribute, so the
generated code reads `self.divisor` at run time instead of baking the value.
"""

from __future__ import annotations

from typing import Any

from htam_graph.rules.analysis.normalise import normalise
from htam_graph.rules.analysis.trace import trace_model
from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpNode, Value

__all__ = ["with_attribute_scalars"]

_MARKER_BASE = 7919.0  # float marker i is _MARKER_BASE + i / 512 (exact in binary, unlikely in a task)
_INT_MARKER_BASE = 1_000_003  # int marker i is _INT_MARKER_BASE + i


def _root_scalars(model: Any) -> list[tuple[str, float | int]]:
    return [
        (k, v)
        for k, v in vars(model).items()
        if not k.startswith("_") and k != "training" and type(v) in (int, float)
    ]


def with_attribute_scalars(
    graph: OpGraph, namespace: dict[str, Any], init_inputs: list[Any], model: Any, inputs: list[Any]
) -> OpGraph:
    """Replace constants that are root numeric attributes by AttrScalar (see the module docstring).

    All attributes are marked in one trace; when that trace fails or changes the structure (an attribute
    that is also a shape, or a `dim` that torch checks is an int), each attribute is tried on its own.
    """
    import dataclasses

    scalars = _root_scalars(model)
    graph = dataclasses.replace(graph, scalar_attrs=tuple(scalars))
    if not scalars:
        return graph
    markers = {name: _marker(i, value) for i, (name, value) in enumerate(scalars)}
    marked = _mark_with(graph, namespace, init_inputs, inputs, markers)
    if marked is not None:
        return marked
    for name, marker in markers.items():
        graph = _mark_with(graph, namespace, init_inputs, inputs, {name: marker}) or graph
    return graph


def _marker(i: int, value: float | int) -> float | int:
    """A value no task uses, of the attribute's own type (torch checks that a `dim` is an int)."""
    return _MARKER_BASE + i / 512 if isinstance(value, float) else _INT_MARKER_BASE + i


def _mark_with(
    graph: OpGraph,
    namespace: dict[str, Any],
    init_inputs: list[Any],
    inputs: list[Any],
    markers: dict[str, float | int],
) -> OpGraph | None:
    """The graph with the constants that follow `markers` replaced; None if the marked trace differs."""
    import dataclasses

    import torch

    with torch.device("meta"):
        twin = namespace["Model"](*init_inputs)
    for name, marker in markers.items():
        setattr(twin, name, marker)
    try:
        marked = normalise(trace_model(twin, inputs).module, with_shapes=False)
    except NotApplicable:
        return None
    if [(n.op, n.kind) for n in marked.nodes] != [(n.op, n.kind) for n in graph.nodes]:
        return None
    by_marker = {(type(m), m): name for name, m in markers.items()}
    nodes = tuple(_mark_node(n, m, by_marker) for n, m in zip(graph.nodes, marked.nodes, strict=True))
    return dataclasses.replace(graph, nodes=nodes)


def _mark_node(node: OpNode, marked: OpNode, by_marker: dict[tuple[type, float | int], str]) -> OpNode:
    import dataclasses

    def mark(original: Value, twin: Value) -> Value:
        if not (isinstance(original, Const) and isinstance(twin, Const)):
            return original
        value, seen = original.value, twin.value
        if not isinstance(seen, int | float) or isinstance(seen, bool):
            return original
        name = by_marker.get((type(seen), seen))
        if name is None and isinstance(seen, float) and seen.is_integer():
            name = by_marker.get((int, int(seen)))  # an int attribute inlined from a 0-d tensor constant
        if name is not None and isinstance(value, int | float) and not isinstance(value, bool):
            return AttrScalar(name, value)
        return original

    operands = tuple(mark(a, b) for a, b in zip(node.operands, marked.operands, strict=True))
    params = tuple((k, mark(a, b)) for (k, a), (_, b) in zip(node.params, marked.params, strict=True))
    return dataclasses.replace(node, operands=operands, params=params)
