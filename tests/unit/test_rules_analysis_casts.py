"""What functional task forms write around the arithmetic: dtype casts that change nothing are read through
(htam_graph/rules/analysis/casts.py), one that changes the dtype is not applicable, and a local `import` in
`Model.__init__` is a name the copied `__init__` binds itself (rules/analysis/skeleton.py)."""

from __future__ import annotations

import pytest

from htam_graph.rules.analysis import analyse_source
from htam_graph.rules.analysis.skeleton import model_skeleton
from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import Ref

TEMPLATE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super(Model, self).__init__()
{init}
        self.w = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.rand(4, 8)]


def get_init_inputs():
    return [8]
"""


def _source(expr: str, init: str = "        pass") -> str:
    return TEMPLATE.format(expr=expr, init=init)


@pytest.mark.parametrize(
    "expr",
    [
        "(x.float() * 2.0).type_as(x) * self.w",
        "(x.to(torch.float32) * 2.0).to(dtype=torch.float32) * self.w",
        "(x.type(torch.float32) * 2.0) * self.w.float()",
    ],
)
def test_casts_to_the_same_dtype_are_read_through(expr: str) -> None:
    graph = analyse_source(_source(expr))
    assert [n.op for n in graph.nodes] == ["mul", "mul"]
    scale, gain = graph.nodes
    assert scale.operands[0] == Ref("x") and gain.operands == (Ref(scale.name), Ref("w"))


@pytest.mark.parametrize("expr", ["x.double() * 2.0", "(x * 2.0).half()", "x.to(torch.float64)"])
def test_a_cast_that_changes_the_dtype_is_not_applicable(expr: str) -> None:
    with pytest.raises(NotApplicable, match="unsupported tensor method"):
        analyse_source(_source(expr))


def test_a_local_import_in_init_is_bound_there() -> None:
    init = "        import math\n        self.scale = 1.0 / math.sqrt(n)"
    skeleton = model_skeleton(_source("x * self.scale", init))
    assert "import math" in skeleton.init_source and "math.sqrt(n)" in skeleton.init_source
    with pytest.raises(NotApplicable, match="task-level name 'math'"):
        model_skeleton(_source("x * self.scale", "        self.scale = 1.0 / math.sqrt(n)"))
