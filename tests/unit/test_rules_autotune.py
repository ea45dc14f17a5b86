"""htam_graph.rules.autotune: the space, the cache keys, persistence, the next-configuration choice, observation.

Results fed to `observe` here are SCRIPTED EvalResult values (a test double, labelled as such in each test):
they stand for what the loop's evaluator measured; the real evaluator is used in
tests/integration/test_rules_autotune_loop.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from htam_graph.model import (
    ErrorKind,
    EvalResult,
    GenerationReply,
    GenerationRequest,
    GlobalDirection,
    Language,
    LocalStrategy,
    Task,
)
from htam_graph.rules import KernelConfig, RulesGenerator, parse_header
from htam_graph.rules.autotune import CPU_DEVICE, AutotuneCache, Autotuner, TuneKey, space_for
from htam_graph.rules.base import header_line
from htam_graph.rules.recipes.tuning import ELEMENTWISE_LADDER, POOL_LADDER, VECTOR_LADDER

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
POOL = "data_reuse.pooling_window_reuse"
CHAIN = "fusion.elementwise_chain"
BLOCK_TUNING = "parallelism.block_size_tuning"
H200 = "NVIDIA H200"


def kb_task(rel: str) -> Task:
    source = (KB / rel).read_text(encoding="utf-8")
    return Task(
        key=f"kernelbench/{rel[:-3]}", suite="kb", level=None, name=rel, source=source, source_sha256="0" * 64
    )


def request(
    task: Task, key: str, *, base: str = "", device: str = "cuda", shape: str = "default"
) -> GenerationRequest:
    g = key.split(".")[0]
    return GenerationRequest(
        task=task,
        step=1,
        direction=GlobalDirection(key=g, name=g, intent=""),
        strategy=LocalStrategy(key=key, name=key, global_key=g, languages=[Language.TRITON], pattern=""),
        base_source=base,
        language=Language.TRITON,
        state_summary="",
        device=device,  # type: ignore[arg-type]
        shape=shape,  # type: ignore[arg-type]
    )


def scripted(runtime_us: float | None, *, gpu: str = H200, error: ErrorKind | None = None) -> EvalResult:
    """A SCRIPTED evaluator result (test double): correct with `runtime_us`, or failed with `error`."""
    ok = error is None
    return EvalResult(
        compiled=ok or error is not ErrorKind.COMPILE_ERROR,
        correct=ok,
        error_kind=error,
        runtime_us=runtime_us if ok else None,
        gpu_name=gpu,
        device="cuda" if gpu else "cpu",
        timing_on_cpu=not gpu,
    )


def reply_for(recipe: str, config: KernelConfig) -> GenerationReply:
    return GenerationReply(source=header_line(recipe, config) + "\nclass ModelNew: ...\n")


# ------------------------------------------------------------------------------------------------ space
def test_space_is_the_default_then_the_tuning_ladders() -> None:
    pool = space_for(POOL)
    assert pool[0] == KernelConfig(block=1024, num_warps=4) and set(POOL_LADDER) <= set(pool)
    chain = space_for(CHAIN)
    assert set(ELEMENTWISE_LADDER) | set(VECTOR_LADDER) == set(chain) and len(chain) == len(set(chain))
    assert space_for("no.such_recipe") == ()


# ------------------------------------------------------------------------------------------------ cache
def test_cache_keys_persistence_and_median(tmp_path: Path) -> None:
    space = space_for(POOL)
    key = TuneKey("kb/t", "default", H200, POOL)
    cache = AutotuneCache(tmp_path)
    cache.record(key, space[1], 30.0)
    cache.record(key, space[1], 10.0)
    cache.record(key, space[1], 20.0)
    cache.record(key, space[2], 25.0)
    # another task, shape, GPU or recipe is another key
    for other in (
        TuneKey("kb/other", "default", H200, POOL),
        TuneKey("kb/t", "smoke", H200, POOL),
        TuneKey("kb/t", "default", "NVIDIA A100", POOL),
        TuneKey("kb/t", "default", H200, CHAIN),
    ):
        assert cache.best(other, space) is None and cache.measurements(other, space) == {}
    reread = AutotuneCache(tmp_path)  # a later process reads the same file
    m = reread.measurements(key, space)
    assert m[space[1]].runtime_us == 20.0 and m[space[1]].runs == 3  # the median of the recorded medians
    assert reread.best(key, space) == (space[1], 20.0)
    assert json.loads((tmp_path / "rules_autotune.json").read_text())  # a plain JSON file


def test_failed_configs_are_never_best_and_foreign_entries_are_ignored(tmp_path: Path) -> None:
    space = space_for(POOL)
    key = TuneKey("kb/t", "default", H200, POOL)
    cache = AutotuneCache(tmp_path)
    cache.record(key, space[0], 50.0)
    cache.record(key, space[1], 1.0)
    cache.record(key, space[1], None, "mismatch")  # once wrong: never chosen, however fast it also ran
    assert cache.best(key, space) == (space[0], 50.0)
    data = json.loads(cache.path.read_text())  # type: ignore[union-attr]
    data[key.text()]['{"block": 65536, "num_warps": 32}'] = {"us": [0.001], "error": ""}  # not in the space
    cache.path.write_text(json.dumps(data))  # type: ignore[union-attr]
    assert cache.best(key, space) == (space[0], 50.0)
    cache.path.write_text("not json")  # type: ignore[union-attr]
    assert cache.best(key, space) is None


def test_in_memory_cache_when_no_directory() -> None:
    cache = AutotuneCache(None)
    key = TuneKey("kb/t", "smoke", CPU_DEVICE, POOL)
    cache.record(key, POOL_LADDER[2], 7.0)
    assert cache.path is None and cache.best(key, space_for(POOL)) == (POOL_LADDER[2], 7.0)


# ------------------------------------------------------------------------------------------------ tuner
def test_propose_takes_the_first_config_neither_measured_proposed_nor_current(tmp_path: Path) -> None:
    task = kb_task("level1/42_Max_Pooling_2D.py")
    tuner = Autotuner(AutotuneCache(tmp_path), device_name=H200)
    req = request(task, BLOCK_TUNING)
    tuner.cache.record(tuner.key(req, POOL), POOL_LADDER[1], 9.0)
    current = POOL_LADDER[0]
    got = [tuner.propose(req, POOL, POOL_LADDER, current) for _ in range(len(POOL_LADDER))]
    assert got[: len(POOL_LADDER) - 2] == list(POOL_LADDER[2:]) and got[-2:] == [None, None]
    # exhausted: the fastest measured one, unless it is the current kernel
    assert tuner.exhausted(req, POOL, POOL_LADDER, current) == POOL_LADDER[1]
    assert tuner.exhausted(req, POOL, POOL_LADDER, POOL_LADDER[1]) is None
    # the same task on the CPU is another key: nothing measured there yet
    assert (
        tuner.propose(request(task, BLOCK_TUNING, device="cpu"), POOL, POOL_LADDER, current) == POOL_LADDER[1]
    )


def test_observe_records_scripted_results_under_the_reported_gpu(tmp_path: Path) -> None:
    task = kb_task("level1/20_LeakyReLU.py")
    tuner = Autotuner(AutotuneCache(tmp_path))  # GPU name unknown until the first result says it
    req = request(task, BLOCK_TUNING)
    cfg_a, cfg_b, cfg_c = ELEMENTWISE_LADDER[:3]
    tuner.observe(req, reply_for(CHAIN, cfg_a), scripted(12.0))
    tuner.observe(req, reply_for(CHAIN, cfg_b), scripted(None, error=ErrorKind.MISMATCH))
    tuner.observe(
        req, reply_for(CHAIN, cfg_c), scripted(None, error=ErrorKind.TIMEOUT)
    )  # not the config's fault
    tuner.observe(
        req, GenerationReply(source="class ModelNew: ...\n"), scripted(1.0)
    )  # no rules header: ignored
    tuner.observe(
        req, reply_for(CHAIN, KernelConfig(block=64, num_warps=1)), scripted(1.0)
    )  # outside the space
    tuner.observe(req, reply_for(CHAIN, cfg_a), None)  # no evaluation
    assert tuner.device_name == H200
    key = TuneKey(task.key, "default", H200, CHAIN)
    m = tuner.cache.measurements(key, space_for(CHAIN))
    assert set(m) == {cfg_a, cfg_b}
    assert m[cfg_a].runtime_us == 12.0 and m[cfg_b].error == "mismatch" and not m[cfg_b].ok
    cpu_req = request(task, BLOCK_TUNING, device="cpu", shape="smoke")
    tuner.observe(cpu_req, reply_for(CHAIN, cfg_c), scripted(900.0, gpu=""))
    cpu_key = TuneKey(task.key, "smoke", CPU_DEVICE, CHAIN)
    assert tuner.cache.best(cpu_key, space_for(CHAIN)) == (cfg_c, 900.0)
    assert tuner.cache.best(key, space_for(CHAIN)) == (cfg_a, 12.0)  # CPU timings never mix with the GPU's


# ------------------------------------------------------------------------------------------------ generator
def test_generator_starts_from_the_cached_best_and_tunes_the_untried(tmp_path: Path) -> None:
    task = kb_task("level1/20_LeakyReLU.py")
    first = RulesGenerator(autotuner=Autotuner(AutotuneCache(tmp_path), device_name=H200))
    base = first.generate(request(task, CHAIN)).source
    assert base is not None and parse_header(base).config == ELEMENTWISE_LADDER[0]  # type: ignore[union-attr]
    assert "autotune cache" not in base  # nothing measured yet: the default configuration
    tuned = first.generate(request(task, BLOCK_TUNING, base=base)).source
    assert tuned is not None
    tuned_config = parse_header(tuned).config  # type: ignore[union-attr]
    assert tuned_config == ELEMENTWISE_LADDER[1] and "not yet measured" in tuned
    # the loop's evaluations (SCRIPTED here): the tuned kernel is faster
    first.observe(request(task, CHAIN), GenerationReply(source=base), scripted(20.0))
    first.observe(request(task, BLOCK_TUNING, base=base), GenerationReply(source=tuned), scripted(15.0))

    later = RulesGenerator(autotuner=Autotuner(AutotuneCache(tmp_path), device_name=H200))  # a later run
    start = later.generate(request(task, CHAIN)).source
    assert start is not None and parse_header(start).config == tuned_config  # type: ignore[union-attr]
    assert "autotune cache" in start and "15.0 us" in start
    nxt = later.generate(request(task, BLOCK_TUNING, base=start)).source
    assert nxt is not None and parse_header(nxt).config == ELEMENTWISE_LADDER[2]  # type: ignore[union-attr]
    # another GPU has no measurements: the default configuration again
    other = RulesGenerator(autotuner=Autotuner(AutotuneCache(tmp_path), device_name="NVIDIA A100"))
    assert parse_header(other.generate(request(task, CHAIN)).source or "").config == ELEMENTWISE_LADDER[0]  # type: ignore[union-attr]


def test_tuning_with_every_config_taken_says_so(tmp_path: Path) -> None:
    task = kb_task("level1/20_LeakyReLU.py")
    gen = RulesGenerator(autotuner=Autotuner(AutotuneCache(tmp_path), device_name=H200))
    base = gen.generate(request(task, CHAIN)).source or ""
    configs = []
    for _ in range(len(VECTOR_LADDER)):
        reply = gen.generate(request(task, "memory_access.vectorized_loads", base=base))
        assert reply.source is not None, reply.error
        configs.append(parse_header(reply.source).config)  # type: ignore[union-attr]
    assert configs == list(VECTOR_LADDER)
    reply = gen.generate(request(task, "memory_access.vectorized_loads", base=base))
    assert reply.source is None and "measured or already proposed" in (reply.error or "")
