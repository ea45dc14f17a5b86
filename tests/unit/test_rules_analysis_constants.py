"""Constants in a task's forward (htam_graph/rules/analysis/constants.py): `torch.tensor(c)` becomes a number (an
attribute read at run time when it came from one), buffers and plain tensor attributes stay tensors ModelNew's
copied `__init__` defines, and a constant the generated code could not define makes the task not applicable."""

from __future__ import annotations

import pytest

from htam_graph.rules.analysis import analyse_source
from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import AttrScalar, Const, OpKind, Ref

TEMPLATE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.register_buffer("shift", torch.randn(8))
        self.limit = torch.tensor(0.75)

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.rand(4, 8)]


def get_init_inputs():
    return [{c}]
"""


def _graph(expr: str, c: str = "0.5"):  # type: ignore[no-untyped-def]
    return analyse_source(TEMPLATE.format(expr=expr, c=c))


def test_a_tensor_built_from_an_attribute_in_forward_is_read_from_that_attribute() -> None:
    graph = _graph("torch.min(x, torch.tensor(self.c)) * 2.0")
    minimum, mul = graph.nodes
    assert minimum.op == "min" and minimum.kind is OpKind.ELEMENTWISE
    assert minimum.operands == (Ref("x"), AttrScalar("c", 0.5))
    assert mul.operands[1] == Const(2.0)
    assert not any(a.name.startswith("_tensor_constant") for a in graph.attrs)  # nothing ModelNew lacks


def test_a_literal_tensor_constant_is_inlined_and_an_integer_one_stays_elementwise() -> None:
    (node,) = _graph("torch.max(x, torch.tensor(0.25))").nodes
    assert node.op == "max" and node.operands == (Ref("x"), Const(0.25))
    # torch.min(x, torch.tensor(2)) is the elementwise minimum with 2, not a reduction over dim 2
    (node,) = _graph("torch.min(x, torch.tensor(2))").nodes
    assert node.op == "min" and node.kind is OpKind.ELEMENTWISE and node.operands == (Ref("x"), Const(2.0))
    (node,) = _graph("torch.min(x, torch.tensor(self.c))", c="3").nodes
    assert node.operands == (Ref("x"), AttrScalar("c", 3.0))  # an int attribute, read at run time


def test_buffers_and_plain_tensor_attributes_stay_tensors_of_the_model() -> None:
    graph = _graph("torch.max(x, self.limit) + self.shift")
    maximum, add = graph.nodes
    assert maximum.operands == (Ref("x"), Ref("limit")) and add.operands == (Ref("max_1"), Ref("shift"))
    kinds = {a.name: (a.kind, a.shape) for a in graph.attrs}
    assert kinds == {"limit": ("buffer", ()), "shift": ("buffer", (8,))}


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        # a CPU vector built in forward against meta inputs: shape propagation already refuses it
        (
            "x * torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])",
            "only 0-d constants|shape propagation failed",
        ),
        ("torch.max(x, -self.limit)", "has no value to inline"),  # computed at trace time from a meta tensor
        ("torch.where(torch.tensor(True), x, x * 2.0)", "constant built inside forward"),
    ],
)
def test_a_constant_the_generated_code_could_not_define_is_not_applicable(expr: str, reason: str) -> None:
    with pytest.raises(NotApplicable, match=reason):
        _graph(expr)
