"""The HTAM loop's semantics on the real embedded graph, with a scripted generator and a scripted evaluator.

The evaluator here is a test double that reads a verdict from a marker line in the candidate
(`# VERDICT: correct 1.5`), so the loop's bookkeeping (best kernel, statuses, gains, what is written to the
graph) is checked exactly. The real evaluator and generators are exercised in test_loop_end_to_end.py.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from htam_graph import memory
from htam_graph.errors import BudgetExceeded
from htam_graph.llm.fake import ScriptedGenerator
from htam_graph.loop import POLICIES, OptimizationLoop, RunConfig
from htam_graph.model import ErrorKind, EvalRequest, EvalResult, GenerationReply, GenerationRequest, Task
from htam_graph.rules import RulesGenerator
from htam_graph.seed import load_seed
from htam_graph.settings import PolicySettings

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
_VERDICT = re.compile(r"# VERDICT: (\w+)(?: ([0-9.]+))?")


class VerdictEvaluator:
    """Returns the verdict written in the candidate; counts calls."""

    def __init__(self) -> None:
        self.requests: list[EvalRequest] = []

    def evaluate(self, request: EvalRequest) -> EvalResult:
        self.requests.append(request)
        m = _VERDICT.search(request.candidate_source)
        verdict, speed = (m.group(1), float(m.group(2) or 1.0)) if m else ("correct", 1.0)
        if verdict == "correct":
            return EvalResult(
                compiled=True,
                correct=True,
                runtime_us=100.0 / speed,
                ref_eager_us=100.0,
                speedup_eager_x=speed,
                gpu_arch="sm_90",
                gpu_name="FakeGPU",
            )
        kind = ErrorKind(verdict)
        return EvalResult(
            compiled=kind is not ErrorKind.COMPILE_ERROR,
            correct=False,
            error_kind=kind,
            error_excerpt=f"scripted {verdict}",
            speedup_eager_x=speed,
            gpu_arch="sm_90",
        )


def _kernel(verdict: str) -> str:
    return (
        "```python\nimport torch\nimport torch.nn as nn\n\n"
        f"# VERDICT: {verdict}\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n```"
    )


def _task(name: str = "level1/20_LeakyReLU") -> Task:
    from htam_graph.importers.kernelbench import parse_task

    task = parse_task(KB / f"{name}.py", KB)
    assert isinstance(task, Task)
    return task


@pytest.fixture
def seeded(store):  # type: ignore[no-untyped-def]
    memory.seed_memory(store, load_seed())
    return store


def _loop(store, generator, evaluator, **cfg):  # type: ignore[no-untyped-def]
    return OptimizationLoop(store, evaluator, generator, PolicySettings(), RunConfig(device="cpu", **cfg))


def test_best_is_the_fastest_correct_kernel_never_an_incorrect_one(seeded) -> None:  # type: ignore[no-untyped-def]
    replies = [
        _kernel("mismatch 3.0"),
        _kernel("correct 1.5"),
        _kernel("correct 1.2"),
        _kernel("hack_detected 9.0"),
        "no code in this reply at all",
    ]
    gen = ScriptedGenerator(replies)
    result = _loop(seeded, gen, VerdictEvaluator(), steps=5).run(_task())

    assert [s.status for s in result.steps] == ["failed", "improved", "correct", "failed", "failed"]
    assert result.steps[4].error_kind is ErrorKind.NO_CODE
    assert result.best_step == 2 and not result.best_is_reference
    assert "correct 1.5" in result.best_source
    assert result.best_speedup_x == pytest.approx(1.5)
    assert result.steps[1].gain == pytest.approx(math.log(1.5))
    assert result.steps[2].gain == pytest.approx(math.log(1.2 / 1.5))  # correct but slower: a negative gain
    assert result.steps[3].gain == 0.0  # a failed hardened check never earns gain


class DegenerateEvaluator(VerdictEvaluator):
    """Every candidate correct on a degenerate task (outputs equal to an input), timed on a GPU or the CPU."""

    def __init__(self, on_cpu: bool) -> None:
        super().__init__()
        self.on_cpu = on_cpu

    def evaluate(self, request: EvalRequest) -> EvalResult:
        result = super().evaluate(request)
        return result.model_copy(update={"task_degenerate": True, "timing_on_cpu": self.on_cpu})


@pytest.mark.parametrize("on_cpu", [False, True], ids=["gpu", "cpu"])
def test_a_degenerate_task_on_a_gpu_returns_the_reference(seeded, on_cpu: bool) -> None:  # type: ignore[no-untyped-def]
    """A correct kernel on a degenerate task earns nothing. On a GPU it was timed (here 0.93x eager) and its
    check cannot tell it from a copy of the input: the reference is returned. On the CPU the latest correct
    kernel is kept, unclaimed at 1.0x, so that `best.py` is a real kernel and the next step starts from it."""
    gen = ScriptedGenerator([_kernel("correct 0.93"), _kernel("correct 1.4")])
    result = _loop(seeded, gen, DegenerateEvaluator(on_cpu), steps=2).run(_task())
    assert [s.status for s in result.steps] == ["correct", "correct"] and all(
        s.gain == 0.0 for s in result.steps
    )
    assert result.best_speedup_x == 1.0
    if on_cpu:
        assert not result.best_is_reference and result.best_step == 2 and "correct 1.4" in result.best_source
    else:
        assert result.best_is_reference and result.best_step is None


def test_a_cut_run_resumes_at_its_next_step_under_the_same_run(seeded) -> None:  # type: ignore[no-untyped-def]
    """A run cut after 2 of 4 steps (a bench device call ended) continues at step 3: the steps before the cut
    are kept as they were, the best so far counts, the memory gets one run with a chain of 4 attempts."""
    from htam_graph.loop import Resume

    first = _loop(seeded, ScriptedGenerator([_kernel("correct 1.5"), _kernel("compile_error")]),
                  VerdictEvaluator(), steps=2).run(_task())  # fmt: skip
    assert first.best_speedup_x == pytest.approx(1.5)
    evaluator = VerdictEvaluator()
    later = ScriptedGenerator([_kernel("correct 1.2"), _kernel("correct 2.0")])
    result = _loop(seeded, later, evaluator, steps=4).run(
        _task(), resume=Resume(first.run_key, tuple(first.steps))
    )
    assert result.run_key == first.run_key and len(evaluator.requests) == 2  # steps 1-2 were not re-run
    assert result.steps[:2] == first.steps
    assert [s.step for s in result.steps] == [1, 2, 3, 4]
    assert [s.status for s in result.steps] == ["improved", "failed", "correct", "improved"]
    # step 3 (1.2x) is judged against the best before the cut (1.5x): slower, a negative gain
    assert result.steps[2].gain == pytest.approx(math.log(1.2 / 1.5))
    assert result.best_step == 4 and result.best_speedup_x == pytest.approx(2.0)
    summary = memory.memory_summary(seeded)
    assert summary.labels.get("Run") == 1 and summary.labels.get("Attempt") == 4
    assert summary.relationships.get("FOLLOWS") == 3  # step 3 follows step 2 across the cut


def test_a_run_cut_after_its_best_returns_that_best(seeded) -> None:  # type: ignore[no-untyped-def]
    from htam_graph.loop import Resume

    first = _loop(seeded, ScriptedGenerator([_kernel("correct 1.7")]), VerdictEvaluator(), steps=1).run(
        _task()
    )
    later = ScriptedGenerator([_kernel("mismatch 3.0")])
    result = _loop(seeded, later, VerdictEvaluator(), steps=2).run(
        _task(), resume=Resume(first.run_key, tuple(first.steps))
    )
    assert result.best_step == 1 and "correct 1.7" in result.best_source and not result.best_is_reference
    assert result.best_speedup_x == pytest.approx(1.7)


def test_every_step_is_written_to_the_graph(seeded) -> None:  # type: ignore[no-untyped-def]
    gen = ScriptedGenerator([_kernel("compile_error"), _kernel("correct 2.0"), _kernel("correct 2.5")])
    result = _loop(seeded, gen, VerdictEvaluator(), steps=3).run(_task())
    summary = memory.memory_summary(seeded)
    assert summary.labels.get("Attempt") == 3
    assert summary.labels.get("Run") == 1
    assert summary.relationships.get("FOLLOWS") == 2
    # every consecutive pair of directions became (or strengthened) an observed transition edge
    observed = sum(t.count for t in summary.top_transitions)
    assert observed == 2
    improved = [s for s in result.steps if s.status == "improved"]
    assert len(improved) == 2
    locals_ = {s.local_key for s in improved}
    evidence = {
        c.strategy.key: c for g in {s.global_key for s in improved} for c in memory.locals_for(seeded, g)
    }
    assert sum(evidence[k].positives for k in locals_ if k) == 2


def test_frozen_memory_writes_nothing(seeded) -> None:  # type: ignore[no-untyped-def]
    before = memory.memory_summary(seeded).labels
    gen = ScriptedGenerator([_kernel("correct 2.0"), _kernel("correct 3.0")])
    _loop(seeded, gen, VerdictEvaluator(), steps=2, record=False).run(_task())
    assert memory.memory_summary(seeded).labels == before


def test_budget_stops_the_run_cleanly_with_steps_recorded(seeded) -> None:  # type: ignore[no-untyped-def]
    from htam_graph.llm.budget import BudgetTracker

    gen = ScriptedGenerator([_kernel("correct 1.1")] * 5, budget=BudgetTracker(0.25), cost_per_call_usd=0.2)
    result = _loop(seeded, gen, VerdictEvaluator(), steps=5).run(_task())
    assert isinstance(result.backend_error, BudgetExceeded)
    assert len(result.steps) == 2  # $0.20 then $0.40 spent; the third call is refused before it starts
    assert memory.memory_summary(seeded).labels.get("Attempt") == 2


class _EchoRules:
    """The real rules generator, with the verdict appended so the scripted evaluator can judge it."""

    name = "rules"

    def __init__(self) -> None:
        self.inner = RulesGenerator()

    def generate(self, request: GenerationRequest) -> GenerationReply:
        reply = self.inner.generate(request)
        if reply.source is None:
            return reply
        return reply.model_copy(
            update={"source": reply.source + f"\n# VERDICT: correct {1.1 + request.step / 10}\n"}
        )


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_runs_with_the_rules_generator(seeded, policy: str) -> None:  # type: ignore[no-untyped-def]
    gen = _EchoRules()
    loop = OptimizationLoop(
        seeded,
        VerdictEvaluator(),
        gen,
        PolicySettings(),
        RunConfig(device="cpu", steps=3, policy=policy),  # type: ignore[arg-type]
        executable_locals=gen.inner.recipes_for,
    )
    result = loop.run(_task())
    assert len(result.steps) == 3
    executable = set(gen.inner.recipes_for(_task()))
    assert all(s.local_key in executable for s in result.steps)
    assert all(s.status == "improved" for s in result.steps)  # 1.2x, 1.3x, 1.4x: each beats the last
    assert result.best_step == 3


def test_same_seed_same_trajectory(seeded) -> None:  # type: ignore[no-untyped-def]
    def trajectory() -> list[tuple[str, str | None]]:
        gen = _EchoRules()
        loop = OptimizationLoop(
            seeded,
            VerdictEvaluator(),
            gen,
            PolicySettings(),
            RunConfig(device="cpu", steps=4, seed=7, record=False),
            executable_locals=gen.inner.recipes_for,
        )
        return [(s.global_key, s.local_key) for s in loop.run(_task()).steps]

    assert trajectory() == trajectory()


class _PicksAnAlternative:
    """A generator that applies the first alternative strategy it is offered (as an LLM may)."""

    name = "picker"

    def __init__(self) -> None:
        self.offered: list[list[str]] = []

    def generate(self, request: GenerationRequest) -> GenerationReply:
        keys = [a.key for a in request.alternatives]
        self.offered.append(keys)
        body = _kernel("correct 1.3").split("```python\n")[1].rstrip("`\n")
        return GenerationReply(source=body, strategy_key=keys[0] if keys else None)


def test_an_llm_may_choose_another_local_strategy_and_that_one_is_recorded(seeded) -> None:  # type: ignore[no-untyped-def]
    gen = _PicksAnAlternative()
    result = _loop(seeded, gen, VerdictEvaluator(), steps=3).run(_task())
    picked = [s.local_key for s in result.steps]
    offered_first = [keys[0] if keys else None for keys in gen.offered]
    assert any(offered_first), "directions with several strategies offer alternatives"
    for step_local, first in zip(picked, offered_first, strict=True):
        if first is not None:
            assert step_local == first


class _Names:
    """A generator whose replies name a given strategy key on their STRATEGY line (or none)."""

    name = "namer"

    def __init__(self, named: str | None) -> None:
        self.named = named
        self.requests: list[GenerationRequest] = []

    def generate(self, request: GenerationRequest) -> GenerationReply:
        self.requests.append(request)
        body = _kernel("correct 1.3").split("```python\n")[1].rstrip("`\n")
        return GenerationReply(source=body, strategy_key=self.named)


@pytest.mark.parametrize("named", [None, "OFFERED", "MEMORY", "fusion.no_such_strategy", "none"])
def test_the_attempt_is_credited_to_the_strategy_the_reply_names(seeded, named: str | None) -> None:  # type: ignore[no-untyped-def]
    """No STRATEGY line: the drawn local. An offered key (any case): that one. A key the memory holds but that
    was not offered: that one. A key the memory does not hold: "unknown", credited to the direction only.
    "none" (no strategy applies): the direction only. The trajectory keeps what was offered and named."""
    task = _task()
    offered_elsewhere = next(
        c.strategy.key
        for g in memory.directions(seeded)
        for c in memory.locals_for(seeded, g.key)
        if c.strategy.global_key == g.key and "reduction" in c.strategy.key
    )
    probe = _Names(None)
    _loop(seeded, probe, VerdictEvaluator(), steps=1, record=False).run(task)
    drawn = probe.requests[0]
    assert drawn.strategy is not None
    key = {"OFFERED": drawn.strategy.key.upper(), "MEMORY": offered_elsewhere}.get(named or "", named)
    gen = _Names(key)
    result = _loop(seeded, gen, VerdictEvaluator(), steps=1).run(task)
    [step] = result.steps
    assert step.generation is not None
    offered = step.generation.offered
    assert offered[0] == gen.requests[0].strategy.key and step.generation.named == key  # type: ignore[union-attr]
    if named == "MEMORY":
        assert offered_elsewhere not in offered  # named, in the memory, but not offered
    expected = {
        None: (offered[0], offered[0]),
        "OFFERED": (offered[0], offered[0]),
        "MEMORY": (offered_elsewhere, offered_elsewhere),
        "fusion.no_such_strategy": (None, "unknown"),
        "none": (None, "none"),
    }[named]
    assert (step.local_key, step.generation.chosen) == expected
    applied = memory.memory_summary(seeded).relationships.get("APPLIED", 0)
    assert applied == (0 if expected[0] is None else 1)


class FlakyEvaluator(VerdictEvaluator):
    """`# VERDICT: flaky S` passes the run's own evaluations but fails any evaluation on the confirmation seeds
    (a kernel at the edge of the tolerance: correct on some seeds, not on others)."""

    def evaluate(self, request: EvalRequest) -> EvalResult:
        if "VERDICT: flaky" in request.candidate_source:
            speed = float(request.candidate_source.split("VERDICT: flaky ")[1].split()[0])
            if request.seed >= 10_000:
                self.requests.append(request)
                return EvalResult(
                    compiled=True, correct=False, error_kind=ErrorKind.MISMATCH,
                    error_excerpt="trial 7: 2/1024 elements outside rtol", gpu_arch="sm_90",
                )  # fmt: skip
            request = request.model_copy(update={"candidate_source": f"# VERDICT: correct {speed}"})
        return super().evaluate(request)


def test_the_returned_kernel_is_confirmed_on_fresh_seeds(seeded) -> None:  # type: ignore[no-untyped-def]
    gen = ScriptedGenerator([_kernel("correct 1.5"), _kernel("correct 1.2")])
    ev = VerdictEvaluator()
    result = _loop(seeded, gen, ev, steps=2, confirm_trials=10).run(_task())
    assert result.best_step == 1 and not result.best_is_reference
    confirm = ev.requests[-1]
    assert len(ev.requests) == 3 and confirm.trials == 10 and confirm.seed >= 10_000
    assert "correct 1.5" in confirm.candidate_source and not confirm.measure_baselines
    assert result.confirmation == "step 1 confirmed: 10 more trials on fresh seeds passed"
    # a confirmation that passed is recorded nowhere: only failed ones are evidence
    assert memory.memory_summary(seeded).labels.get("Attempt") == 2


def test_a_kernel_failing_its_confirmation_is_replaced_by_the_next_best(seeded) -> None:  # type: ignore[no-untyped-def]
    gen = ScriptedGenerator([_kernel("correct 1.2"), _kernel("flaky 10.8"), _kernel("correct 1.05")])
    result = _loop(seeded, gen, FlakyEvaluator(), steps=3, confirm_trials=10).run(_task())
    assert result.best_step == 1 and "correct 1.2" in result.best_source
    assert result.best_speedup_x == pytest.approx(1.2)
    assert result.confirmation.startswith("step 2 failed its confirmation (mismatch: trial 7")
    assert result.confirmation.endswith("step 1 confirmed: 10 more trials on fresh seeds passed")


def test_when_every_kernel_fails_confirmation_the_reference_is_returned(seeded) -> None:  # type: ignore[no-untyped-def]
    gen = ScriptedGenerator([_kernel("flaky 3.0"), _kernel("correct 0.9")])
    result = _loop(seeded, gen, FlakyEvaluator(), steps=2, confirm_trials=10).run(_task())
    assert result.best_is_reference and result.best_step is None and result.best_speedup_x == 1.0
    assert "class Model" in result.best_source  # the reference as a ModelNew
    assert result.confirmation.endswith("the reference is returned")


def test_no_confirmation_on_the_cpu_by_default(seeded) -> None:  # type: ignore[no-untyped-def]
    ev = VerdictEvaluator()
    result = _loop(seeded, ScriptedGenerator([_kernel("correct 1.5")]), ev, steps=1).run(_task())
    assert len(ev.requests) == 1 and result.confirmation == "" and result.best_step == 1


def test_a_failed_confirmation_is_recorded_as_negative_evidence(seeded) -> None:  # type: ignore[no-untyped-def]
    gen = ScriptedGenerator([_kernel("correct 1.2"), _kernel("flaky 10.8")])
    result = _loop(seeded, gen, FlakyEvaluator(), steps=2, confirm_trials=10).run(_task())
    flaky = result.steps[1]
    assert flaky.status == "improved" and result.best_step == 1
    summary = memory.memory_summary(seeded)
    assert summary.labels.get("Attempt") == 3  # 2 steps + the failed confirmation
    assert summary.relationships.get("FOLLOWS") == 2  # step 1 -> step 2 -> its confirmation
    assert sum(t.count for t in summary.top_transitions) == 1  # a re-check is no move between directions
    evidence = {c.strategy.key: c for c in memory.locals_for(seeded, flaky.global_key)}[flaky.local_key]
    assert evidence.negatives >= 1 and evidence.attempts >= 2
    assert result.confirmation.endswith("step 1 confirmed: 10 more trials on fresh seeds passed")


class _SameSourcePerStrategy:
    """A deterministic generator: one fixed candidate per local strategy (as a rule recipe with a fixed config)."""

    name = "rules"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def generate(self, request: GenerationRequest) -> GenerationReply:
        assert request.strategy is not None
        self.calls.append(request.strategy.key)
        body = _kernel("correct 1.2").split("```python\n")[1].rstrip("`\n")
        return GenerationReply(source=f"{body}\n# strategy {request.strategy.key}\n")


def test_a_deterministic_candidate_is_never_evaluated_twice_in_a_run(seeded) -> None:  # type: ignore[no-untyped-def]
    task = _task()
    two = RulesGenerator().recipes_for(task)[:2]
    gen, evaluator = _SameSourcePerStrategy(), VerdictEvaluator()
    loop = OptimizationLoop(
        seeded,
        evaluator,
        gen,
        PolicySettings(),
        RunConfig(device="cpu", steps=5, policy="random"),
        executable_locals=lambda _task: two,
    )
    result = loop.run(task)
    sources = [r.candidate_source for r in evaluator.requests]
    assert len(sources) == len(set(sources)) == 2  # each strategy's one candidate, once
    assert sorted(s.local_key or "" for s in result.steps) == sorted(two)
    assert result.stopped_reason == "every applicable strategy's candidate was already evaluated in this run"
    assert len(gen.calls) > 2  # repeats were generated, recognised and set aside, never evaluated


def test_an_llm_reply_repeating_a_candidate_is_still_evaluated(seeded) -> None:  # type: ignore[no-untyped-def]
    gen = ScriptedGenerator([_kernel("correct 1.2")] * 3)
    evaluator = VerdictEvaluator()
    result = _loop(seeded, gen, evaluator, steps=3).run(_task())
    assert len(result.steps) == 3 and len(evaluator.requests) == 3
