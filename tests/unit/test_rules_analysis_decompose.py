"""Calls the analysis rewrites into the ops they are defined by (htam_graph/rules/analysis/decompose.py and
adaptive.py): F.normalize, torch.linalg.vector_norm and adaptive pooling, and the forms that stay not
applicable."""

from __future__ import annotations

import pytest

from htam_graph.rules.analysis import analyse_source
from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import Const, OpKind, Ref

TEMPLATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = {pool}

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.rand(4, 6, 12, 10)]


def get_init_inputs():
    return []
"""


def _graph(expr: str, pool: str = "nn.Identity()"):  # type: ignore[no-untyped-def]
    return analyse_source(TEMPLATE.format(expr=expr, pool=pool))


def test_f_normalize_is_a_norm_a_clamp_and_a_division_with_its_shapes() -> None:
    norm, clamp, quotient = _graph("F.normalize(x, p=2.0, dim=1, eps=1e-8)").nodes
    assert norm.op == "norm" and norm.kind is OpKind.REDUCTION
    assert dict(norm.params) == {"p": Const(2.0), "dim": Const(1), "keepdim": Const(True)}
    assert norm.shape == (4, 1, 12, 10)
    assert clamp.op == "clamp" and clamp.operands == (Ref(norm.name),) and clamp.param("min") == Const(1e-8)
    assert quotient.op == "truediv" and quotient.operands == (Ref("x"), Ref(clamp.name))
    assert quotient.shape == (4, 6, 12, 10)


def test_f_normalize_defaults_are_torch_s() -> None:
    norm, clamp, _ = _graph("F.normalize(x)").nodes
    assert dict(norm.params)["p"] == Const(2.0) and dict(norm.params)["dim"] == Const(1)
    assert clamp.param("min") == Const(1e-12)


def test_vector_norm_is_torch_norm_with_ord_as_p() -> None:
    (norm,) = _graph("torch.linalg.vector_norm(x, 1, dim=(2, 3))").nodes
    assert norm.op == "norm"
    assert dict(norm.params) == {"p": Const(1), "dim": Const((2, 3)), "keepdim": Const(False)}
    assert norm.shape == (4, 6)
    (whole,) = _graph("torch.linalg.vector_norm(x)").nodes  # every element, ord 2
    assert dict(whole.params) == {"p": Const(2), "dim": Const(None), "keepdim": Const(False)}


def test_vector_norm_with_a_dtype_is_not_applicable() -> None:
    with pytest.raises(NotApplicable, match="dtype"):
        _graph("torch.linalg.vector_norm(x, dtype=torch.float64)")


def test_adaptive_pool_is_kept_with_its_output_size_and_size_one_is_a_reduction() -> None:
    (pool,) = _graph("self.pool(x)", pool="nn.AdaptiveAvgPool2d((3, 5))").nodes
    assert pool.op == "adaptive_avg_pool2d" and pool.kind is OpKind.POOL and pool.module_path == "pool"
    assert dict(pool.params) == {"output_size": Const((3, 5))} and pool.shape == (4, 6, 3, 5)
    (pool,) = _graph("F.adaptive_max_pool2d(x, (None, 2))").nodes  # None keeps that size
    assert pool.op == "adaptive_max_pool2d" and pool.module_path is None
    assert dict(pool.params) == {"output_size": Const((None, 2))} and pool.shape == (4, 6, 12, 2)
    (amax,) = _graph("self.pool(x)", pool="nn.AdaptiveMaxPool2d(1)").nodes
    assert amax.op == "amax" and dict(amax.params) == {"dim": Const((-2, -1)), "keepdim": Const(True)}
    (mean,) = _graph("self.pool(x)", pool="nn.AdaptiveAvgPool2d(1)").nodes
    assert mean.op == "mean" and mean.shape == (4, 6, 1, 1)


def test_adaptive_pool_returning_indices_is_not_applicable() -> None:
    with pytest.raises(NotApplicable, match="not a tensor"):  # (values, indices)
        _graph("self.pool(x)[0]", pool="nn.AdaptiveMaxPool2d(2, return_indices=True)")


def test_no_pooling_recipe_fuses_an_adaptive_pool() -> None:
    from htam_graph.model import Task
    from htam_graph.rules.generator import default_generator

    source = TEMPLATE.format(
        expr="torch.sigmoid(self.pool(torch.relu(x))) * 2.0", pool="nn.AdaptiveAvgPool2d(3)"
    )
    task = Task(
        key="t/level2/t", suite="kernelbench", level=2, name="t.py", source=source, source_sha256="0" * 64
    )
    assert default_generator().recipes_for(task) == [
        "fusion.composed_kernels",
        "parallelism.block_size_tuning",
    ]
