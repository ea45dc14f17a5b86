"""Autotuning through the real loop on the CPU: real embedded graph, real SubprocessEvaluator (Triton interpreter,
smoke shapes), the rules generator with a file cache. The runtimes in the cache must be exactly the ones the
evaluator measured for those steps (interpreter timings, kept under the device label "cpu"), and a later run on
the same (task, shape, device) starts from the fastest of them.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from htam_graph import memory
from htam_graph.importers.kernelbench import parse_task
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.loop import OptimizationLoop, RunConfig
from htam_graph.model import Task
from htam_graph.rules import RulesGenerator, parse_header
from htam_graph.rules.autotune import CPU_DEVICE, AutotuneCache, Autotuner, TuneKey, space_for
from htam_graph.rules.recipes.tuning import ELEMENTWISE_LADDER
from htam_graph.seed import load_seed
from htam_graph.settings import PolicySettings, Settings

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
CHAIN = "fusion.elementwise_chain"
BLOCK_TUNING = "parallelism.block_size_tuning"


def leaky_relu() -> Task:
    task = parse_task(KB / "level1" / "20_LeakyReLU.py", KB)
    assert isinstance(task, Task)
    return task


def run_loop(store, evaluator, cache_dir: Path, executable: list[str], steps: int):  # type: ignore[no-untyped-def]
    generator = RulesGenerator(autotuner=Autotuner(AutotuneCache(cache_dir)))
    cfg = RunConfig(device="cpu", shape="smoke", steps=steps, trials=2, timeout_s=300)
    loop = OptimizationLoop(
        store, evaluator, generator, PolicySettings(), cfg, executable_locals=lambda task: executable
    )
    return loop.run(leaky_relu())


def test_tuning_steps_fill_the_cache_and_a_later_run_starts_from_the_best(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    memory.seed_memory(store, load_seed())
    evaluator = SubprocessEvaluator(cache_dir=tmp_path / "runtime")
    cache_dir = tmp_path / "autotune"
    first = run_loop(store, evaluator, cache_dir, [BLOCK_TUNING], steps=3)
    assert [s.local_key for s in first.steps] == [BLOCK_TUNING] * 3
    measured = {}
    for s in first.steps:
        assert s.status != "failed" and s.result is not None, s.error_excerpt
        assert s.result.timing_on_cpu and s.result.runtime_us and s.result.runtime_us > 0
        header = parse_header(s.source or "")
        assert header is not None and header.recipe == CHAIN
        measured[header.config] = s.result.runtime_us
    # each step proposed a configuration not measured before: the base's next ones in ladder order
    assert list(measured) == [ELEMENTWISE_LADDER[1], ELEMENTWISE_LADDER[0], ELEMENTWISE_LADDER[2]]

    key = TuneKey(leaky_relu().key, "smoke", CPU_DEVICE, CHAIN)
    cache = AutotuneCache(cache_dir)
    assert json.loads((cache_dir / "rules_autotune.json").read_text(encoding="utf-8"))
    recorded = cache.measurements(key, space_for(CHAIN))
    assert {c: m.runtime_us for c, m in recorded.items()} == measured  # exactly the evaluator's numbers
    fastest = min(measured, key=lambda c: measured[c])

    later = run_loop(store, evaluator, cache_dir, [CHAIN], steps=1)
    (step,) = later.steps
    assert step.status != "failed", step.error_excerpt
    assert parse_header(step.source or "").config == fastest  # type: ignore[union-attr]
    assert "Launch configuration from the autotune cache" in (step.source or "")
    assert cache.measurements(key, space_for(CHAIN))[fastest].runs == 2  # the later run's measurement added


def test_run_cli_writes_the_cache_under_the_htam_home(htam_settings: Settings) -> None:
    from htam_graph.cli.main import _register, cli

    path = htam_settings.htam_home / "autotune" / "rules_autotune.json"

    def runs_recorded() -> int:
        if not path.exists():
            return 0
        data = json.loads(path.read_text(encoding="utf-8"))
        return sum(
            len(v.get("us") or []) + bool(v.get("error"))
            for k, entry in data.items()
            if "20_LeakyReLU|smoke|cpu|" in k
            for v in entry.values()
        )

    before = runs_recorded()
    _register()
    env = {
        "HTAM_HOME": str(htam_settings.htam_home),
        "HTAM_GRAPH_NAME": htam_settings.graph_name,
        "NEO4J_URI": "",
    }
    args = [
        "run",
        str(KB / "level1" / "20_LeakyReLU.py"),
        "--device",
        "cpu",
        "--shape",
        "smoke",
        "--steps",
        "1",
    ]
    res = CliRunner().invoke(cli, args, env=env, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert (
        runs_recorded() == before + 1
    )  # the one evaluated rules kernel, keyed by task, smoke shapes and cpu
