"""A run learns from its own failures (htam_graph/run_lessons.py), on the real embedded graph with a scripted
generator and evaluator: a strategy that fails twice with the same error class is not chosen again in the run,
and a strategy whose candidate raised is not offered again on the same inputs. Each test runs the same seeded run
with the lessons switched off as a control, so it shows what the lessons change."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

from htam_graph import memory
from htam_graph.loop import OptimizationLoop, RunConfig, RunResult
from htam_graph.loop import run as loop_module  # where a run makes its RunLessons
from htam_graph.model import ErrorKind, EvalRequest, EvalResult, GenerationReply, GenerationRequest
from htam_graph.rules import RulesGenerator
from htam_graph.run_lessons import RunLessons
from htam_graph.seed import load_seed
from htam_graph.settings import PolicySettings

semantics = runpy.run_path(str(Path(__file__).with_name("test_loop_semantics.py")))
_task = semantics["_task"]
_VERDICT_EVALUATOR = semantics["VerdictEvaluator"]

ATTRIBUTE = "AttributeError: 'ModelNew' object has no attribute '_tensor_constant0'"


class _Evaluator(_VERDICT_EVALUATOR):  # type: ignore[misc, valid-type]
    """The scripted verdicts, with a real exception line for runtime errors (their error class)."""

    def evaluate(self, request: EvalRequest) -> EvalResult:
        result: EvalResult = super().evaluate(request)
        if result.error_kind is ErrorKind.RUNTIME_ERROR:
            excerpt = f"  candidate.py:30 in forward: return k(self._tensor_constant0)\n{ATTRIBUTE}"
            result = result.model_copy(update={"error_excerpt": excerpt})
        return result


class _PerStrategy:
    """A deterministic generator (as the rules): each strategy's verdict is fixed; the source changes per step
    (as an autotuned recipe's configuration does), so no candidate repeats and only the lessons can stop a
    failing strategy from being chosen again."""

    name = "rules"

    def __init__(self, verdicts: dict[str, str]) -> None:
        self.verdicts = verdicts

    def generate(self, request: GenerationRequest) -> GenerationReply:
        assert request.strategy is not None
        verdict = self.verdicts[request.strategy.key]
        body = f"import torch\nimport torch.nn as nn\n# VERDICT: {verdict}\nclass ModelNew(nn.Module):\n    pass\n"
        return GenerationReply(source=f"{body}# {request.strategy.key} step {request.step}\n")


class _Forgetful(RunLessons):
    """The control: a run that learns nothing from its failures."""

    def learn(self, local_key: str | None, kind: ErrorKind | None, excerpt: str, inputs: str) -> bool:
        return False


@pytest.fixture
def seeded(store):  # type: ignore[no-untyped-def]
    memory.seed_memory(store, load_seed())
    return store


def _run(
    store: Any, verdicts: dict[str, str], steps: int, policy: str = "random", seed: int = 3
) -> RunResult:
    keys = list(verdicts)
    return OptimizationLoop(
        store,
        _Evaluator(),
        _PerStrategy(verdicts),
        PolicySettings(),
        RunConfig(device="cpu", steps=steps, policy=policy, seed=seed),  # type: ignore[arg-type]
        executable_locals=lambda _task: keys,
    ).run(_task())


def _strategies(n: int) -> list[str]:
    keys = RulesGenerator().recipes_for(_task())
    assert len(keys) >= n, keys
    return keys[:n]


def test_a_repeated_error_class_demotes_the_strategy_for_the_rest_of_the_run(seeded, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    bad, good, other = _strategies(3)
    verdicts = {bad: "mismatch", good: "correct 1.0", other: "correct 1.0"}  # 1.0x: the base never changes
    result = _run(seeded, verdicts, steps=16)
    chosen = [s.local_key for s in result.steps]
    failures = [i for i, s in enumerate(result.steps) if s.status == "failed"]
    assert len(failures) == 2 and all(chosen[i] == bad for i in failures)  # failed twice: the class repeated
    assert bad not in chosen[failures[1] + 1 :] and len(chosen) == 16  # then never chosen again in the run
    # the failures are negative evidence for the strategy in the graph
    evidence = {c.strategy.key: c for c in memory.locals_for(seeded, result.steps[failures[0]].global_key)}
    assert evidence[bad].negatives >= 2 and evidence[bad].positives == 0
    # control: the same seeded run without the lessons keeps drawing the failing strategy
    monkeypatch.setattr(loop_module, "RunLessons", _Forgetful)
    control = _run(seeded, verdicts, steps=16)
    assert sum(s.status == "failed" for s in control.steps) > 2


def test_the_htam_policy_also_stops_choosing_a_strategy_that_keeps_failing(seeded, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    bad, good = _strategies(2)
    verdicts = {bad: "mismatch", good: "correct 1.0"}
    result = _run(seeded, verdicts, steps=8, policy="htam")
    failed = [s for s in result.steps if s.status == "failed"]
    assert 1 <= len(failed) <= 2 and all(s.local_key == bad for s in failed)
    monkeypatch.setattr(loop_module, "RunLessons", _Forgetful)
    control = _run(seeded, verdicts, steps=8, policy="htam")
    assert sum(s.status == "failed" for s in control.steps) > 2  # one more negative attempt barely moves UCB


def test_a_strategy_whose_candidate_raised_is_not_offered_again_on_the_same_inputs(
    seeded, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    raising, fine = _strategies(2)
    verdicts = {raising: "runtime_error", fine: "correct 1.0"}
    result = _run(seeded, verdicts, steps=6)
    raised = [s for s in result.steps if s.local_key == raising]
    assert len(raised) == 1 and raised[0].error_kind is ErrorKind.RUNTIME_ERROR  # once, then banned
    assert ATTRIBUTE in raised[0].error_excerpt
    assert all(s.local_key == fine for s in result.steps if s is not raised[0]) and len(result.steps) == 6
    monkeypatch.setattr(loop_module, "RunLessons", _Forgetful)
    control = _run(seeded, verdicts, steps=12)
    assert sum(s.local_key == raising for s in control.steps) > 1


def test_a_run_whose_every_strategy_raised_stops_and_says_why(seeded) -> None:  # type: ignore[no-untyped-def]
    one, two = _strategies(2)
    result = _run(seeded, {one: "runtime_error", two: "compile_error"}, steps=6)
    assert len(result.steps) == 2 and result.best_is_reference
    assert result.stopped_reason.endswith("or raised on the same inputs")
