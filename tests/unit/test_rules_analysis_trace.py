"""Tracing forwards plain torch.fx rejects: `fn=` defaults (Robust-KBench) and shape introspection."""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.importers.robust_kbench import scan
from htam_graph.rules.analysis import analyse_source
from htam_graph.rules.analysis.skeleton import model_skeleton
from htam_graph.rules.base import NotApplicable
from htam_graph.rules.generator import RulesGenerator
from htam_graph.rules.ops import AttrScalar, Const, OpKind, Ref

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "robust_kbench"

FN_DEFAULT = """
import torch
import torch.nn as nn


def scaled_relu(x, scale: float):
    return torch.relu(x) * scale


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, fn=scaled_relu):
        return fn(x, self.scale)


def get_inputs():
    return [torch.rand(4, 8)]


def get_init_inputs():
    return [2.5]
"""

INTROSPECTION = """
import torch
import torch.nn as nn
import torch.nn.functional as F


def norm_fn(x, weight, bias{bias_default}):
    shape = tuple(x.shape[-len({shape_of}.shape):])
    assert x.dim() == 3 and x.ndim == 3 and x.size(-1) == {shape_of}.size(-1)
    return F.layer_norm(x, shape, {affine}eps=1e-6)


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n))
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x, fn=norm_fn):
        return fn(x, self.weight, self.bias)


def get_inputs():
    return [torch.rand(2, 3, 16)]


def get_init_inputs():
    return [16]
"""


def test_robust_kbench_sample_traces_to_a_functional_layer_norm() -> None:
    graph = analyse_source(scan(SAMPLE).tasks[0].source)
    assert [i.name for i in graph.inputs] == ["x"]  # `fn` is bound to forward_fn, not an input
    (node,) = graph.nodes
    assert (node.op, node.kind, node.module_path) == ("layer_norm", OpKind.NORM, None)
    assert node.operands == (Ref("x"), Ref("weight"), Ref("bias"))
    assert node.param("normalized_shape") == Const((64, 256, 256))  # len(weight.shape) answered: 3
    assert node.param("eps") == AttrScalar("eps", 1e-5)  # read from self.eps at run time
    assert graph.shape_specialised


def test_fn_default_is_traced_through_without_specialising() -> None:
    graph = analyse_source(FN_DEFAULT)
    assert [i.name for i in graph.inputs] == ["x"]
    assert [n.op for n in graph.nodes] == ["relu", "mul"]
    assert graph.nodes[1].operands[1] == AttrScalar("scale", 2.5)
    assert not graph.shape_specialised  # no shape was asked for: nothing is specific to the sizes


def test_fn_default_becomes_none_in_the_generated_signature() -> None:
    assert model_skeleton(FN_DEFAULT).forward_args == ("x", "fn=None")


def test_shape_introspection_is_answered_with_the_input_sizes() -> None:
    source = INTROSPECTION.format(bias_default="", shape_of="weight", affine="weight=weight, bias=bias, ")
    (node,) = analyse_source(source).nodes
    assert node.param("normalized_shape") == Const((16,)) and node.param("eps") == Const(1e-6)


def test_plain_trace_error_is_reported_when_no_stage_traces() -> None:
    source = FN_DEFAULT.replace("return fn(x, self.scale)", "return fn(x, self.scale) if x.sum() > 0 else x")
    with pytest.raises(NotApplicable, match="torch.fx cannot trace the forward"):
        analyse_source(source)


def test_norm_recipe_refuses_a_specialised_shape_without_weight_or_bias() -> None:
    task = scan(SAMPLE).tasks[0]
    source = INTROSPECTION.format(bias_default="", shape_of="x", affine="")
    verdict = RulesGenerator().applies(
        "reduction_structure.single_pass_norm", task.model_copy(update={"source": source})
    )
    assert not verdict and "specialised" in verdict.reason, verdict.reason
    affine = INTROSPECTION.format(bias_default="", shape_of="weight", affine="weight=weight, bias=bias, ")
    assert RulesGenerator().applies(
        "reduction_structure.single_pass_norm", task.model_copy(update={"source": affine})
    )
