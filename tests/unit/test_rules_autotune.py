"""htam_graph.rules.autotune: the cache only ever selects a ladder configuration; CPU skips measuring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from htam_graph.model import Task
from htam_graph.rules import KernelConfig, parse_header
from htam_graph.rules.autotune import AutotuneCache, TuneKey, autotune, ladder_for, shape_signature
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes
from htam_graph.rules.recipes.tuning import POOL_LADDER

KB = Path(__file__).resolve().parents[2].parent / "shared" / "kernelbench"
POOL = "data_reuse.pooling_window_reuse"
pytestmark = pytest.mark.skipif(not KB.is_dir(), reason="no KernelBench checkout")


def view_of(rel: str):  # type: ignore[no-untyped-def]
    source = (KB / rel).read_text(encoding="utf-8")
    return task_view(Task(key=rel, suite="kb", level=None, name=rel, source=source, source_sha256="0" * 64))


def test_ladder_and_signature() -> None:
    assert ladder_for(POOL) == POOL_LADDER
    assert ladder_for("no.such_recipe") == ()
    assert shape_signature(view_of("level1/42_Max_Pooling_2D.py")) == "x:float32:32x64x512x512"


def test_cpu_measures_nothing_and_writes_no_cache(tmp_path: Path) -> None:
    recipe = default_recipes()[POOL]
    calls: list[str] = []

    def measure(source: str) -> float:
        calls.append(source)
        return 1.0

    cache = AutotuneCache(tmp_path)
    config = autotune(
        view_of("level1/42_Max_Pooling_2D.py"),
        recipe,
        device="cpu",
        gpu_name="cpu",
        measure=measure,
        cache=cache,
    )  # type: ignore[arg-type]
    assert config == recipe.default_config and calls == [] and not cache.path.exists()


def test_measures_once_picks_the_fastest_correct_and_caches(tmp_path: Path) -> None:
    recipe = default_recipes()[POOL]
    view = view_of("level2/82_Conv2d_Tanh_Scaling_BiasAdd_Max.py")
    seen: list[KernelConfig] = []

    def measure(source: str) -> float | None:
        header = parse_header(source)
        assert header is not None
        seen.append(header.config)
        if header.config.block == 128 and header.config.num_warps == 2:
            return None  # e.g. wrong results: must never be chosen even though it would be "fastest"
        return 1.0 / header.config.block + header.config.num_warps * 1e-4

    cache = AutotuneCache(tmp_path)
    best = autotune(view, recipe, device="cuda", gpu_name="NVIDIA H200", measure=measure, cache=cache)  # type: ignore[arg-type]
    assert seen == list(POOL_LADDER)
    assert best == KernelConfig(block=1024, num_warps=8)
    # second call: served from the cache, nothing measured
    again = autotune(
        view,
        recipe,
        device="cuda",
        gpu_name="NVIDIA H200",
        measure=lambda s: pytest.fail("measured twice"),
        cache=cache,
    )  # type: ignore[arg-type]
    assert again == best
    # another GPU is another key
    other = autotune(view, recipe, device="cuda", gpu_name="NVIDIA A100", measure=lambda s: 1.0, cache=cache)  # type: ignore[arg-type]
    assert other == POOL_LADDER[0]


def test_a_cache_entry_outside_the_ladder_is_ignored(tmp_path: Path) -> None:
    recipe = default_recipes()[POOL]
    view = view_of("level1/42_Max_Pooling_2D.py")
    key = TuneKey(POOL, shape_signature(view), "GPU")
    cache = AutotuneCache(tmp_path)
    cache.path.parent.mkdir(parents=True, exist_ok=True)
    cache.path.write_text(
        json.dumps({key.text(): {"config": {"block": 65536, "num_warps": 32}}}), encoding="utf-8"
    )
    assert cache.get(key, POOL_LADDER) is None
    cache.path.write_text("not json", encoding="utf-8")
    assert cache.get(key, POOL_LADDER) is None
    chosen = autotune(view, recipe, device="cuda", gpu_name="GPU", measure=lambda s: 2.0, cache=cache)  # type: ignore[arg-type]
    assert chosen in POOL_LADDER and cache.get(key, POOL_LADDER) == chosen
