"""The packaged seed memory: it loads, and its content meets what the rest of htam-graph relies on."""

from __future__ import annotations

from collections import Counter

import pytest

from htam_graph.model import Language, SeedMemory
from htam_graph.seed import OP_TAGS, load_seed, seed_sha256

GLOBAL_KEYS = {
    "memory_access",
    "data_reuse",
    "fusion",
    "parallelism",
    "launch_overhead",
    "reduction_structure",
    "algebraic_rewrite",
    "compute_efficiency",
    "library_offload",
    "precision",
}

# Locals the offline rule generator attaches executable recipes to (exact keys).
REQUIRED_LOCALS = {
    "fusion.elementwise_chain",
    "fusion.library_epilogue",
    "reduction_structure.row_softmax",
    "reduction_structure.single_pass_norm",
    "reduction_structure.dim_reduction",
    "memory_access.vectorized_loads",
    "memory_access.coalesced_layout",
    "parallelism.block_size_tuning",
    "parallelism.persistent_grid",
    "launch_overhead.fuse_small_kernels",
    "algebraic_rewrite.drop_noops",
    "algebraic_rewrite.fold_scalar_chain",
    "algebraic_rewrite.diag_matmul_as_broadcast",
    "library_offload.channels_last_conv",
    "data_reuse.pooling_window_reuse",
    "precision.tf32_matmul",
    "precision.bf16_compute",
}


@pytest.fixture(scope="module")
def seed() -> SeedMemory:
    return load_seed()


def test_packaged_seed_loads_with_version_1(seed: SeedMemory) -> None:
    assert seed.version == 1


def test_counts(seed: SeedMemory) -> None:
    assert len(seed.globals) >= 10
    assert len(seed.locals) >= 44
    assert len(seed.transitions) >= 25


def test_required_global_keys_exist(seed: SeedMemory) -> None:
    assert GLOBAL_KEYS <= {g.key for g in seed.globals}


def test_required_local_keys_exist(seed: SeedMemory) -> None:
    missing = REQUIRED_LOCALS - {loc.key for loc in seed.locals}
    assert not missing, f"missing locals: {sorted(missing)}"


def test_at_least_three_locals_per_global(seed: SeedMemory) -> None:
    per_global = Counter(loc.global_key for loc in seed.locals)
    thin = {g.key: per_global[g.key] for g in seed.globals if per_global[g.key] < 3}
    assert not thin, f"globals with fewer than 3 locals: {thin}"


def test_both_languages_covered(seed: SeedMemory) -> None:
    triton = [loc for loc in seed.locals if Language.TRITON in loc.languages]
    cuda = [loc for loc in seed.locals if Language.CUDA in loc.languages]
    assert len(triton) >= 15
    assert len(cuda) >= 15
    # Some strategies are language-specific (warp shuffles, __ldg / autotune, tl.dot).
    assert any(loc.languages == [Language.CUDA] for loc in seed.locals)
    assert any(loc.languages == [Language.TRITON] for loc in seed.locals)


def test_required_locals_languages(seed: SeedMemory) -> None:
    by_key = {loc.key: loc for loc in seed.locals}
    assert set(by_key["fusion.elementwise_chain"].languages) == {Language.TRITON, Language.CUDA}
    assert Language.CUDA in by_key["reduction_structure.warp_shuffle_reduce"].languages
    assert by_key["reduction_structure.warp_shuffle_reduce"].languages == [Language.CUDA]


def test_globals_are_fully_described(seed: SeedMemory) -> None:
    for g in seed.globals:
        assert len(g.intent) >= 60, g.key
        assert g.goals and g.triggers and g.risks, g.key


def test_locals_are_non_trivial(seed: SeedMemory) -> None:
    for loc in seed.locals:
        assert len(loc.pattern) >= 80, loc.key
        assert loc.applicable_when, loc.key
        assert loc.checks and all(len(c) >= 20 for c in loc.checks), loc.key
        assert loc.risks and all(len(r) >= 20 for r in loc.risks), loc.key
        assert set(loc.op_tags) <= OP_TAGS, loc.key


def test_local_texts_are_distinct(seed: SeedMemory) -> None:
    patterns = [loc.pattern for loc in seed.locals]
    assert len(set(patterns)) == len(patterns)


def test_precision_locals_require_non_strict_policy(seed: SeedMemory) -> None:
    precision = [loc for loc in seed.locals if loc.global_key == "precision"]
    assert len(precision) >= 3
    for loc in precision:
        conditions = " ".join(loc.applicable_when).lower()
        assert "non-strict precision policy" in conditions, loc.key
        assert "never under fp32-strict" in conditions, loc.key
        assert "only under the" in loc.pattern.lower(), loc.key


def test_only_precision_locals_use_plain_tf32(seed: SeedMemory) -> None:
    # Outside the precision track, TF32 may only appear as a warning or as error-compensated 3xTF32.
    for loc in seed.locals:
        if loc.global_key == "precision":
            continue
        assert 'input_precision="tf32")' not in loc.pattern, loc.key


def test_transitions_carry_rationale_not_numbers(seed: SeedMemory) -> None:
    pairs = [(t.src, t.dst) for t in seed.transitions]
    assert len(set(pairs)) == len(pairs)
    for t in seed.transitions:
        assert t.src != t.dst
        assert len(t.rationale) >= 60, (t.src, t.dst)
        assert t.risks and t.applicable_when, (t.src, t.dst)
    # Every global takes part in at least one prior, in and out.
    assert {t.src for t in seed.transitions} == {g.key for g in seed.globals}
    assert {t.dst for t in seed.transitions} == {g.key for g in seed.globals}


def test_fusion_to_memory_access_prior_exists(seed: SeedMemory) -> None:
    assert ("fusion", "memory_access") in {(t.src, t.dst) for t in seed.transitions}


def test_seed_sha256_is_stable_hex() -> None:
    digest = seed_sha256()
    assert len(digest) == 64 and int(digest, 16) >= 0
    assert seed_sha256() == digest


def test_op_tag_vocabulary_matches_the_task_tagger() -> None:
    # Strategies are matched to tasks by op tag; both sides must speak the same vocabulary.
    from htam_graph.importers.optags import VOCABULARY

    assert set(VOCABULARY) == OP_TAGS
