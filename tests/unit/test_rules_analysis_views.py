"""Flatten -> softmax -> unflatten folded into one softmax over the flattened dims (rules/analysis/views.py), and
the pooling modules before a library op that the reduction plan keeps as PyTorch calls (recipes/reduce/plan.py)."""

from __future__ import annotations

import pytest

from htam_graph.model import Task
from htam_graph.rules import applies
from htam_graph.rules.analysis import analyse_source
from htam_graph.rules.base import NotApplicable
from htam_graph.rules.generator import task_view
from htam_graph.rules.ops import AttrScalar, Const, OpKind, Ref
from htam_graph.rules.recipes import default_recipes
from htam_graph.rules.recipes.reduce.plan import plan_reduction

LSE = "reduction_structure.online_logsumexp"


def source(forward: str, init: str = "        pass", inputs: str = "torch.randn(2, 3, 4, 5, 6)") -> str:
    return (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass Model(nn.Module):\n"
        f"    def __init__(self):\n        super().__init__()\n{init}\n"
        f"    def forward(self, x):\n{forward}\n\n\n"
        f"def get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return []\n"
    )


def task(text: str) -> Task:
    return Task(key="synthetic", suite="x", level=None, name="s", source=text, source_sha256="0" * 64)


UNPACK = "        b, c, d, h, w = x.shape\n"


@pytest.mark.parametrize(
    ("forward", "op", "dims"),
    [
        (UNPACK + "        y = torch.softmax(x.view(b, c, -1), dim=2)\n        return y.view(b, c, d, h, w)", "softmax", (2, 3, 4)),
        (UNPACK + "        y = x.reshape(b, c, -1).softmax(-1)\n        return y.reshape(b, c, d, h, w)", "softmax", (2, 3, 4)),
        ("        b, c, d, h, w = x.size()\n        y = F.log_softmax(x.view(b, -1), dim=1)\n        return y.view(b, c, d, h, w)", "log_softmax", (1, 2, 3, 4)),
        ("        y = torch.softmax(torch.flatten(x, 3), dim=-1)\n        return y.view_as(x)", "softmax", (3, 4)),
        ("        y = x.flatten(2).softmax(dim=2)\n        return y.view(x.shape)", "softmax", (2, 3, 4)),
        ("        y = torch.softmax(x.view(x.size(0), x.size(1), -1), 2)\n        return y.reshape_as(x)", "softmax", (2, 3, 4)),
        ("        y = torch.softmax(x.view((x.shape[0], -1)), 1)\n        return y.view(x.shape)", "softmax", (1, 2, 3, 4)),
    ],
)  # fmt: skip
def test_flatten_softmax_unflatten_is_one_softmax_over_the_flattened_dims(
    forward: str, op: str, dims: tuple[int, ...]
) -> None:
    graph = analyse_source(source(forward))
    assert len(graph.nodes) == 1
    node = graph.nodes[0]
    assert (node.kind, node.op, node.operands) == (OpKind.SOFTMAX, op, (Ref("x"),))
    assert node.param("dim") == Const(dims)
    assert node.shape == (2, 3, 4, 5, 6)
    assert graph.output == Ref(node.name)


@pytest.mark.parametrize(
    "forward",
    [
        # softmax over a dim the view did not flatten
        UNPACK + "        y = torch.softmax(x.view(b, c, -1), dim=1)\n        return y.view(b, c, d, h, w)",
        # viewed back to another order of the sizes (a different tensor)
        UNPACK + "        y = torch.softmax(x.view(b, c, -1), dim=2)\n        return y.view(b, c, w, h, d)",
        # not viewed back: the result is 3-d
        UNPACK + "        return torch.softmax(x.view(b, c, -1), dim=2)",
        # a size is also used elsewhere: folding would drop a value the forward needs
        UNPACK + "        y = torch.softmax(x.view(b, c, -1), dim=2)\n        return y.view(b, c, d, h, w) * w",
        # the flattened view is used twice
        UNPACK + "        f = x.view(b, c, -1)\n        return (torch.softmax(f, dim=2) + f).view(b, c, d, h, w)",
        # softmax with a dtype: not the plain softmax
        UNPACK + "        y = torch.softmax(x.view(b, c, -1), dim=2, dtype=torch.float64)\n        return y.view(b, c, d, h, w)",
        # a flatten of middle dims only
        "        y = torch.flatten(x, 1, 2).softmax(dim=1)\n        return y.view_as(x)",
        # the leading sizes of another tensor
        UNPACK + "        y = torch.softmax(x.view(c, b, -1), dim=2)\n        return y.view(b, c, d, h, w)",
    ],
)  # fmt: skip
def test_other_view_patterns_are_not_folded(forward: str) -> None:
    try:
        graph = analyse_source(source(forward))
    except NotApplicable:
        return  # the size reads / views stay and are rejected, as before
    assert not any(n.kind is OpKind.SOFTMAX and isinstance(n.param("dim").value, tuple) for n in graph.nodes)  # type: ignore[union-attr]


def test_the_fold_keeps_attribute_scalars_of_the_ops_around_it() -> None:
    init = "        self.lo = 0.25\n        self.hi = 0.75"
    forward = (
        UNPACK + "        x = torch.clamp(x, self.lo, self.hi)\n        b2, c2, d2, h2, w2 = x.shape\n"
        "        y = torch.softmax(x.view(b2, c2, -1), dim=2)\n        return y.view(b2, c2, d2, h2, w2) * self.lo"
    )
    graph = analyse_source(source(forward, init))  # the first unpack is unused: five size nodes, not folded
    assert [n.op for n in graph.nodes if n.kind is OpKind.STRUCTURAL] == ["size"] * 5
    assert [n.op for n in graph.nodes if n.kind is not OpKind.STRUCTURAL] == ["clamp", "softmax", "mul"]
    forward = forward.replace(UNPACK, "")
    graph = analyse_source(source(forward, init))
    clamp, softmax, mul = graph.nodes
    assert clamp.param("min") == AttrScalar("lo", 0.25) and mul.operands[1] == AttrScalar("lo", 0.25)
    assert softmax.param("dim") == Const((2, 3, 4)) and softmax.operands == (Ref(clamp.name),)


# ------------------------------------------------------------------------------------------- pooling before
CONV = (
    "        self.pool = nn.AvgPool3d(2)\n        self.conv = nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1)\n"
    "        self.scale = nn.Parameter(torch.ones(1, 4, 1, 1, 1))"
)
SPATIAL = (
    "        x = self.conv(self.pool(x))\n        b, c, d, h, w = x.shape\n"
    "        y = torch.softmax(x.view(b, c, -1), dim=2)\n        return y.view(b, c, d, h, w) * self.scale"
)
CONV_INPUT = "torch.randn(2, 3, 4, 6, 8)"


def test_a_pool_before_the_library_op_stays_a_pytorch_call() -> None:
    t = task(source(SPATIAL, CONV, CONV_INPUT))
    plan = plan_reduction(task_view(t).graph)
    assert [n.op for n in plan.prefix] == ["avg_pool3d"] and plan.library is not None
    assert plan.reducer.param("dim") == Const((2, 3, 4)) and plan.mode == "normalise"
    assert applies(LSE, t)
    emitted = default_recipes()[LSE].emit(task_view(t), default_recipes()[LSE].default_config)  # type: ignore[arg-type]
    assert "        y = self.pool(x)  # library op, unchanged\n        y = self.conv(y)" in emitted
    assert "return fused_softmax_mul(y, self.scale, (2, 3, 4))" in emitted


@pytest.mark.parametrize(
    ("forward", "reason"),
    [
        # the pool output is read again after the conv: the kernel would need it as a second input
        (SPATIAL.replace("x = self.conv(self.pool(x))", "p = self.pool(x)\n        x = self.conv(p) + p.mean()"), "used by more than"),
        # a pool that does not feed the library op
        ("        x = self.pool(x)\n        return torch.softmax(x, dim=1)", "neither elementwise"),
    ],
)  # fmt: skip
def test_pools_before_a_library_op_only_as_its_own_input(forward: str, reason: str) -> None:
    verdict = applies(LSE, task(source(forward, CONV, CONV_INPUT)))
    assert not verdict and reason in verdict.reason, verdict.reason


def test_the_pool_chain_must_feed_the_library_op_alone() -> None:
    forward = "        p = self.pool(x)\n        return torch.softmax(self.conv(p), dim=1) * p.sum()"
    with pytest.raises(NotApplicable, match="avg_pool3d's output is used by more than conv_transpose3d"):
        plan_reduction(task_view(task(source(forward, CONV, CONV_INPUT))).graph)
