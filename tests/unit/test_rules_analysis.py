"""The torch.fx analysis of a task's forward, and the skeleton ModelNew reuses (no kernels run here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.rules.analysis import analyse_source
from htam_graph.rules.analysis.skeleton import model_skeleton
from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import AttrScalar, Const, OpKind, Ref

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"

TEMPLATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

{helpers}

class Model(nn.Module):
    def __init__(self{init_args}):
        super(Model, self).__init__()
{init_body}

    def forward(self, x):
{forward}


def get_inputs():
    return [torch.rand(4, 8)]


def get_init_inputs():
    return [{init_values}]
"""


def task(
    forward: str,
    init_body: str = "        pass",
    init_args: str = "",
    init_values: str = "",
    helpers: str = "",
) -> str:
    return TEMPLATE.format(
        forward=forward, init_body=init_body, init_args=init_args, init_values=init_values, helpers=helpers
    )


def test_conv_epilogue_graph_has_shapes_params_and_module_scalars() -> None:
    graph = analyse_source((KB / "level2/54_Conv2d_Multiply_LeakyReLU_GELU.py").read_text())
    assert [n.op for n in graph.nodes] == ["conv2d", "mul", "leaky_relu", "gelu"]
    conv, mul, leaky, gelu = graph.nodes
    assert conv.kind is OpKind.LIBRARY and conv.module_path == "conv" and conv.shape == (64, 64, 254, 254)
    assert graph.tensor("multiplier") is not None and graph.shape_of("multiplier") == (64, 1, 1)
    assert graph.tensor("conv.weight") is not None and graph.shape_of("conv.weight") == (64, 64, 3, 3)
    assert mul.operands == (Ref("conv"), Ref("multiplier"))
    assert leaky.param("negative_slope") == AttrScalar("leaky_relu.negative_slope", 0.01)
    assert gelu.param("approximate") == Const("none")
    assert graph.output == Ref("gelu")


def test_root_attribute_scalars_are_found_by_the_marker_trace() -> None:
    graph = analyse_source((KB / "level2/86_Matmul_Divide_GELU.py").read_text())
    div = graph.nodes[1]
    assert div.op == "truediv" and div.operands[1] == AttrScalar("divisor", 10.0)
    assert ("divisor", 10.0) in graph.scalar_attrs


def test_literals_stay_constants_and_attributes_become_attr_scalars() -> None:
    source = task(
        "        return F.leaky_relu(x * 2.0, negative_slope=self.slope) + F.hardtanh(x, -0.5, self.top)",
        init_body="        self.slope = 0.3\n        self.top = 0.75",
    )
    graph = analyse_source(source)
    mul, leaky, hardtanh, _ = graph.nodes
    assert mul.operands[1] == Const(2.0)
    assert leaky.param("negative_slope") == AttrScalar("slope", 0.3)
    assert hardtanh.param("min_val") == Const(-0.5) and hardtanh.param("max_val") == AttrScalar("top", 0.75)


def test_gelu_tanh_approximation_is_captured() -> None:
    graph = analyse_source(task("        return F.gelu(x, approximate='tanh')"))
    assert graph.nodes[0].param("approximate") == Const("tanh")


@pytest.mark.parametrize(
    ("forward", "reason"),
    [
        ("        if x.sum() > 0:\n            return x\n        return -x", "trace"),
        ("        return torch.max(x, dim=1)[1]", "not a tensor"),
        ("        return torch.max(x, 1)", "not a tensor"),
        ("        return torch.rand_like(x) * x", "rand_like"),
        ("        return x.exponential_()", "exponential_"),
        ("        s = x.shape\n        return x.view(s)", "torch.Size used other than item by item"),
        ("        return torch.add(x, x, alpha=2)", "alpha"),
        ("        return torch.softmax(x, dim=1, dtype=torch.float64)", "dtype"),
    ],
)
def test_untraceable_or_unknown_forwards_are_not_applicable(forward: str, reason: str) -> None:
    with pytest.raises(NotApplicable, match=reason):
        analyse_source(task(forward))


def test_size_reads_and_views_stay_symbolic() -> None:
    """`n, c = x.shape` gives size nodes, not the analysed numbers; the view's shape has them as operands."""
    forward = "        n, c = x.shape\n        return x.view(n, c // 2, 2).permute(0, 2, 1)[..., :n]"
    graph = analyse_source(task(forward))
    ops = [node.op for node in graph.nodes]
    assert ops == ["size", "size", "int_floordiv", "reshape", "permute", "index"], ops
    reshape, permute, index = graph.nodes[3:]
    assert reshape.operands[1:] == (Ref(graph.nodes[0].name), Ref(graph.nodes[2].name), Const(2))
    assert permute.param("dims") == Const((0, 2, 1)) and permute.kind is OpKind.LAYOUT
    assert index.param("index") == Const("[..., :{0}]") and index.operands[1] == Ref(graph.nodes[0].name)


def test_ops_the_tables_do_not_know_are_kept_as_calls() -> None:
    """`torch.roll`, `x.repeat`, `torch.einsum`: CALL nodes with the argument list as written; only recipes that
    keep calls (the composed path) accept the graph."""
    forward = (
        "        y = torch.roll(x, 1, 1).repeat([1, 2])\n        return torch.einsum('ij,kj->ik', y, y) * 2.0"
    )
    graph = analyse_source(task(forward))
    roll, repeat, einsum, mul = graph.nodes
    assert [n.kind for n in (roll, repeat, einsum)] == [OpKind.CALL] * 3 and mul.kind is OpKind.ELEMENTWISE
    assert roll.param("call") == Const("torch.roll") and roll.param("template") == Const("{0}, {1}, {2}")
    assert roll.operands == (Ref("x"), Const(1), Const(1))
    assert repeat.param("call") == Const(".repeat") and repeat.param("template") == Const("{0}, ({1}, {2}, )")
    assert einsum.param("template") == Const("'ij,kj->ik', {0}, {1}")


def test_a_pool_over_the_whole_plane_is_its_reduction() -> None:
    """A window read from the input's own sizes covers the plane at every size: mean / amax with keepdim."""
    forward = (
        "        y = x[None]\n        a = F.avg_pool2d(y, y.shape[-2:])\n"
        "        return a + F.max_pool1d(y, (y.size(-1),))"
    )
    graph = analyse_source(task(forward))
    ops = [(n.op, n.param("dim"), n.param("keepdim")) for n in graph.nodes if n.kind is OpKind.REDUCTION]
    assert ops == [("mean", Const((-2, -1)), Const(True)), ("amax", Const((-1,)), Const(True))], ops
    assert not any(n.kind is OpKind.POOL for n in graph.nodes)
    shifted = analyse_source(task("        y = x[None]\n        return F.avg_pool2d(y, (3, 3), padding=1)"))
    assert [n.kind for n in shifted.nodes] == [OpKind.LAYOUT, OpKind.POOL]


def test_a_broken_task_source_is_not_applicable() -> None:
    with pytest.raises(NotApplicable, match="failed to load"):
        analyse_source("import torch\nraise RuntimeError('boom')\n")
    with pytest.raises(NotApplicable, match="get_inputs"):
        analyse_source("import torch\nclass Model: pass\n")


def test_skeleton_rewrites_super_and_keeps_the_constructor() -> None:
    skeleton = model_skeleton(
        task("        return x", init_args=", a, b=2", init_body="        self.w = nn.Linear(a, b)")
    )
    assert "def __init__(self, a, b=2):" in skeleton.init_source
    assert "super().__init__()" in skeleton.init_source and "Model" not in skeleton.init_source
    assert "self.w = nn.Linear(a, b)" in skeleton.init_source
    assert skeleton.forward_args == ("x",)
    assert (
        "import torch.nn.functional as F" in skeleton.imports
        and "import triton.language as tl" in skeleton.imports
    )


def test_skeleton_rejects_an_init_that_needs_task_level_names() -> None:
    helpers = "class Block(nn.Module):\n    pass\n"
    with pytest.raises(NotApplicable, match="Block"):
        model_skeleton(task("        return x", init_body="        self.b = Block()", helpers=helpers))
