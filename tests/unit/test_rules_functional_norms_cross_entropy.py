"""Functional norms (F.group_norm / F.rms_norm / F.instance_norm) and cross-entropy in the analysis and the
composed plan: the nodes they become, and NotApplicable (never a crash or a kernel) for the arguments the
kernels do not reproduce. No kernel runs here (test_rules_composed_functional_interpreter.py runs them)."""

from __future__ import annotations

import pytest

from htam_graph.model import Task
from htam_graph.rules.analysis import analyse_source
from htam_graph.rules.base import NotApplicable
from htam_graph.rules.compose import KEY
from htam_graph.rules.generator import RulesGenerator, task_view
from htam_graph.rules.ops import AttrScalar, Const, OpKind, Ref
from htam_graph.rules.recipes import default_recipes

TEMPLATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6))
        self.b = nn.Parameter(torch.randn(6))
        self.register_buffer("rm", torch.zeros(6))
        self.register_buffer("rv", torch.ones(6))
{init}

    def forward(self, x, t):
        return {forward}


def get_inputs():
    return [torch.randn(2, 6, 5), {target}]


def get_init_inputs():
    return []
"""
INDEX_TARGET = "torch.randint(0, 6, (2, 5))"


def source(forward: str, init: str = "", target: str = INDEX_TARGET) -> str:
    return TEMPLATE.format(forward=forward, init=init or "        pass", target=target)


def task_of(text: str) -> Task:
    return Task(key="unit/functional", suite="kernelbench", level=1, name="f.py", source=text,
                source_sha256="0" * 64)  # fmt: skip


def test_functional_group_norm_is_the_group_norm_statistics() -> None:
    graph = analyse_source(source("F.group_norm(x, 3, self.w, self.b, eps=1e-3)"))
    (node,) = graph.nodes
    assert (node.kind, node.op, node.operands) == (OpKind.NORM, "group_norm", (Ref("x"), Ref("w"), Ref("b")))
    assert node.params == (("num_groups", Const(3)), ("eps", Const(1e-3)))
    plain = analyse_source(source("F.group_norm(x, num_groups=2)")).nodes[0]
    assert plain.operands == (Ref("x"), Const(None), Const(None))
    assert plain.params == (("num_groups", Const(2)), ("eps", Const(1e-5)))


def test_group_count_from_a_model_attribute_is_read_at_run_time() -> None:
    node = analyse_source(source("F.group_norm(x, self.g)", "        self.g = 3")).nodes[0]
    assert node.param("num_groups") == AttrScalar("g", 3)
    candidate = default_recipes()[KEY].emit(
        task_view(task_of(source("F.group_norm(x, self.g)", "        self.g = 3"))),
        default_recipes()[KEY].default_config,
    )
    assert "int(self.g)" in candidate and "row_layout(full_shape, (1, 2), True, g)" in candidate


def test_functional_rms_and_instance_norms() -> None:
    rms = analyse_source(source("F.rms_norm(x, (5,))")).nodes[0]
    assert (rms.op, rms.operands) == ("rms_norm", (Ref("x"), Const(None), Const(None)))
    assert rms.params == (("normalized_shape", Const((5,))), ("eps", Const(None)))
    inst = analyse_source(source("F.instance_norm(x, weight=self.w, momentum=0.5, eps=1e-4)")).nodes[0]
    assert (inst.op, inst.operands) == ("instance_norm", (Ref("x"), Ref("w"), Const(None)))
    assert inst.params == (("eps", Const(1e-4)),)


def test_cross_entropy_forms_are_one_loss_node() -> None:
    functional = analyse_source(source("F.cross_entropy(x * 2.0, t)")).nodes[-1]
    module = analyse_source(source("self.loss(x, t)", "        self.loss = nn.CrossEntropyLoss()")).nodes[-1]
    for node in (functional, module):
        assert (node.kind, node.op, node.shape) == (OpKind.LOSS, "cross_entropy", ())
        assert node.param("reduction") == Const("mean") and node.param("ignore_index") == Const(-100)
    assert module.module_path == "loss"


@pytest.mark.parametrize(
    ("forward", "init", "reason"),
    [
        ("F.instance_norm(x, self.rm, self.rv)", "", "running_mean"),
        ("F.instance_norm(x, use_input_stats=False)", "", "use_input_stats"),
        ("F.cross_entropy(x, t, label_smoothing=0.1)", "", "label_smoothing"),
        ("F.cross_entropy(x, t, ignore_index=0)", "", "ignore_index"),
        ("F.cross_entropy(x, t, weight=self.w)", "", "weight"),
        (
            "self.loss(x, t)",
            "        self.loss = nn.CrossEntropyLoss(label_smoothing=0.2)",
            "label_smoothing",
        ),
        ("self.loss(x, t)", "        self.loss = nn.CrossEntropyLoss(weight=torch.ones(6))", "class weights"),
    ],
)
def test_unsupported_arguments_are_not_applicable(forward: str, init: str, reason: str) -> None:
    text = source(forward, init)
    with pytest.raises(NotApplicable, match=reason):
        analyse_source(text)
    assert RulesGenerator().recipes_for(task_of(text)) == []


def test_probability_targets_get_no_kernel() -> None:
    text = source("F.cross_entropy(x, t)", target="torch.softmax(torch.randn(2, 6, 5), dim=1)")
    verdict = RulesGenerator().applies(KEY, task_of(text))
    assert not verdict and "class indices" in verdict.reason
    assert RulesGenerator().recipes_for(task_of(text)) == []


def test_cross_entropy_of_computed_targets_is_not_applicable() -> None:
    text = source("F.cross_entropy(x, t * 2)")  # integer ops are never fused
    verdict = RulesGenerator().applies(KEY, task_of(text))
    assert not verdict and "int64" in verdict.reason
    assert RulesGenerator().recipes_for(task_of(text)) == []
