"""Which local strategies an LLM is offered (`policy.relevance`, `policy.allowed_under`), in which order
(`policy.rank_offers`), and the rule that keeps one direction from coming three times in a row.

The four cases are the kinds of inapplicable offers the study of a capable model found (7 of 14 requests): a
strategy offered because of one shared generic tag, or because of one tag of a combination it needs whole."""

from __future__ import annotations

import pytest

from htam_graph.importers.optags import op_tags
from htam_graph.model import ArchEvidence, Language, LocalStrategy, LocalWithEvidence, PrecisionPolicy
from htam_graph.policy import (
    allowed_under,
    defining_tags,
    direction_to_rest,
    evidence_score,
    rank_offers,
    relevance,
)
from htam_graph.seed import load_seed

CONV_ADD_SCALE_SIGMOID_GROUPNORM = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, c_in, c_out, k, groups, bias_shape, scale_shape):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.group_norm = nn.GroupNorm(groups, c_out)

    def forward(self, x):
        x = self.conv(x)
        x = x + self.bias
        x = x * self.scale
        x = torch.sigmoid(x)
        return self.group_norm(x)
"""
PLAIN_SUM = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)
"""
PLAIN_CONV = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, c_in, c_out, k):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, bias=False)

    def forward(self, x):
        return self.conv(x)
"""
GEMM_SUM = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)

    def forward(self, x):
        return torch.sum(self.linear(x), dim=1, keepdim=True)
"""
CONV_RELU = PLAIN_CONV.replace("return self.conv(x)", "return torch.relu(self.conv(x))")
LEAKY_RELU = """import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def forward(self, x):
        return F.leaky_relu(x, 0.01)
"""


@pytest.fixture(scope="module")
def seed_locals() -> dict[str, LocalStrategy]:
    return {loc.key: loc for loc in load_seed().locals}


def _offered(locals_: dict[str, LocalStrategy], source: str) -> set[str]:
    tags = op_tags(source)
    return {k for k, loc in locals_.items() if relevance(loc, tags) is not None}


def test_case_1_a_shared_generic_tag_does_not_offer_a_diagonal_matmul_rewrite_for_a_conv(
    seed_locals: dict[str, LocalStrategy],
) -> None:
    tags = op_tags(CONV_ADD_SCALE_SIGMOID_GROUPNORM)
    assert {"broadcast", "elementwise", "conv"} <= set(tags)  # the generic tags it shares with the rewrite
    offered = _offered(seed_locals, CONV_ADD_SCALE_SIGMOID_GROUPNORM)
    assert "algebraic_rewrite.diag_matmul_as_broadcast" not in offered
    assert "fusion.matmul_epilogue_in_kernel" not in offered
    assert {
        "fusion.library_epilogue",
        "fusion.conv_reduction_epilogue",
        "fusion.elementwise_chain",
    } <= offered


def test_case_2_a_plain_sum_is_not_offered_rewrites_that_need_a_linear_map(
    seed_locals: dict[str, LocalStrategy],
) -> None:
    offered = _offered(seed_locals, PLAIN_SUM)
    assert "algebraic_rewrite.reduce_before_linear" not in offered
    assert (
        "fusion.matmul_epilogue_in_kernel" not in offered and "fusion.conv_reduction_epilogue" not in offered
    )
    assert {"reduction_structure.dim_reduction", "parallelism.split_reduction"} <= offered
    assert "algebraic_rewrite.reduce_before_linear" in _offered(seed_locals, GEMM_SUM)  # where it does fit


def test_case_3_a_plain_conv_is_not_offered_an_epilogue_or_a_norm_fold(
    seed_locals: dict[str, LocalStrategy],
) -> None:
    offered = _offered(seed_locals, PLAIN_CONV)
    assert "fusion.library_epilogue" not in offered and "library_offload.fold_bn_into_conv" not in offered
    assert "library_offload.channels_last_conv" in offered and "data_reuse.triton_dot_tiling" in offered
    assert "fusion.library_epilogue" in _offered(seed_locals, CONV_RELU)  # with an epilogue it fits


def test_case_4_reduced_precision_is_never_offered_under_fp32_strict(
    seed_locals: dict[str, LocalStrategy],
) -> None:
    tf32 = seed_locals["precision.tf32_convolution"]
    assert relevance(tf32, op_tags(PLAIN_CONV)) is not None  # the op fits ...
    assert not allowed_under(tf32, PrecisionPolicy.FP32_STRICT)  # ... the policy does not
    assert allowed_under(tf32, PrecisionPolicy.TF32)
    assert allowed_under(seed_locals["library_offload.channels_last_conv"], PrecisionPolicy.FP32_STRICT)


def test_generic_tasks_and_generic_strategies_still_meet(seed_locals: dict[str, LocalStrategy]) -> None:
    offered = _offered(seed_locals, LEAKY_RELU)
    assert {"memory_access.vectorized_loads", "fusion.elementwise_chain"} <= offered
    assert "memory_access.coalesced_layout" in offered  # no op tags: applies to every task
    assert defining_tags(["activation", "elementwise"]) == {"activation", "elementwise"}
    assert defining_tags(["conv", "elementwise"]) == {"conv"}


def test_every_requires_tags_entry_is_part_of_its_op_tags(seed_locals: dict[str, LocalStrategy]) -> None:
    combos = {k: loc for k, loc in seed_locals.items() if loc.requires_tags}
    assert len(combos) >= 5
    assert all(set(loc.requires_tags) < set(loc.op_tags) for loc in combos.values())


def _candidate(key: str, tags: list[str], *arch: ArchEvidence) -> LocalWithEvidence:
    s = LocalStrategy(
        key=key, name=key, global_key="g", languages=[Language.TRITON], pattern="p", op_tags=tags
    )
    return LocalWithEvidence(strategy=s, by_arch=list(arch))


def test_offers_are_ranked_by_relevance_then_by_this_gpus_evidence() -> None:
    """UCB put untried strategies first and cut those with real evidence; the offer order is relevance, then
    evidence (this GPU weighted 1, another foreign_weight), untried in between winners and losers."""
    winner = _candidate("a.winner", ["reduction"], ArchEvidence(gpu_arch="sm_90", improved=2, gain_sum=0.6))
    untried = _candidate("b.untried", ["reduction"])
    loser = _candidate("c.loser", ["reduction"], ArchEvidence(gpu_arch="sm_90", failed=3))
    specific = _candidate("d.specific", ["reduction", "loss"])
    anywhere = _candidate("e.anywhere", [])
    ranked = rank_offers(
        [anywhere, loser, untried, winner, specific], ["reduction", "loss"], "sm_90", 0.5, 0.1
    )
    assert [c.strategy.key for c in ranked] == [
        "d.specific",
        "a.winner",
        "b.untried",
        "c.loser",
        "e.anywhere",
    ]


def test_foreign_evidence_counts_less_and_cpu_never_appears() -> None:
    here = _candidate("x", ["reduction"], ArchEvidence(gpu_arch="sm_90", improved=1, gain_sum=0.5))
    there = _candidate("y", ["reduction"], ArchEvidence(gpu_arch="sm_80", improved=1, gain_sum=0.5))
    assert evidence_score(here, "sm_90", 0.5, 0.1) > evidence_score(there, "sm_90", 0.5, 0.1) > 0.0


def test_no_direction_three_times_in_a_row_while_another_is_allowed() -> None:
    assert direction_to_rest(["fusion", "fusion"], ["fusion", "memory_access"]) == "fusion"
    assert direction_to_rest(["memory_access", "fusion"], ["fusion", "memory_access"]) is None
    assert direction_to_rest(["fusion"], ["fusion", "memory_access"]) is None
    assert direction_to_rest(["fusion", "fusion"], ["fusion"]) is None  # nothing else to draw
