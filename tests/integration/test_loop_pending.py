"""A run stopped awaiting a reply and resumed with it is the run that got the reply at once (the loop's side).

Two fresh graphs, the same task, policy and seed. One run gets every reply online; the other is stopped at
steps 2 and 4 (its generator raises `AwaitingReply`), and each time resumed from its steps and the saved
`PendingStep`, as `run --out` and `bench` resume it from files. The evaluator is a double that reads a verdict
from the candidate (`# VERDICT: correct 1.5`), so statuses, gains, the best kernel and the memory's evidence are
exact; the real evaluator is exercised in test_llm_deferred.py and test_loop_end_to_end.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from htam_graph import memory
from htam_graph.errors import AwaitingReply
from htam_graph.llm.generator import reply_from_text
from htam_graph.loop import OptimizationLoop, Resume, RunConfig, RunResult
from htam_graph.model import EvalRequest, EvalResult, GenerationReply, GenerationRequest, Task
from htam_graph.seed import load_seed
from htam_graph.settings import PolicySettings

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
_VERDICT = re.compile(r"# VERDICT: (\w+) ([0-9.]+)")


def _kernel(verdict: str, strategy: str = "") -> str:
    line = f"STRATEGY: {strategy}\n" if strategy else ""
    return (
        f"{line}```python\nimport torch\nimport torch.nn as nn\n\n# VERDICT: {verdict}\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n```"
    )


REPLIES = {
    1: _kernel("correct 1.5"),
    2: _kernel("mismatch 2.0", strategy="none"),
    3: _kernel("correct 1.2"),
    4: "No code this time.",
    5: _kernel("correct 1.8", strategy="no.such.key"),
}


class Verdicts:
    def evaluate(self, request: EvalRequest) -> EvalResult:
        verdict, speed = _VERDICT.findall(request.candidate_source)[0]
        if verdict == "correct":
            return EvalResult(
                compiled=True, correct=True, runtime_us=100.0 / float(speed), ref_eager_us=100.0,
                speedup_eager_x=float(speed), gpu_arch="sm_90", gpu_name="FakeGPU",
            )  # fmt: skip
        return EvalResult(compiled=True, correct=False, error_kind=verdict, gpu_arch="sm_90")


class ByStep:
    """Answers each step from REPLIES; steps in `awaited` are awaited the first time they are asked."""

    name = "by-step"

    def __init__(self, awaited: set[int]) -> None:
        self.awaited = set(awaited)
        self.asked: list[int] = []

    def generate(self, request: GenerationRequest) -> GenerationReply:
        self.asked.append(request.step)
        if request.step in self.awaited:
            self.awaited.discard(request.step)
            raise AwaitingReply("later", prompt={"system": "s", "memory": "", "user": request.task.key})
        return reply_from_text(REPLIES[request.step], model="by-step")


def _task() -> Task:
    from htam_graph.importers.kernelbench import parse_task

    task = parse_task(KB / "level1" / "20_LeakyReLU.py", KB)
    assert isinstance(task, Task)
    return task


def _loop(store: Any, generator: Any) -> OptimizationLoop:
    cfg = RunConfig(device="cuda", steps=5, seed=3, confirm_trials=0)
    return OptimizationLoop(store, Verdicts(), generator, PolicySettings(), cfg)


def _comparable(result: RunResult) -> list[tuple[Any, ...]]:
    return [
        (
            s.step, s.global_key, s.local_key, s.direction_probability, s.status, s.error_kind, s.gain,
            s.speedup_x, s.best_speedup_x, s.source, s.generation.offered if s.generation else None,
            s.generation.chosen if s.generation else None,
        )
        for s in result.steps
    ]  # fmt: skip


def test_a_run_resumed_at_each_awaited_step_equals_the_uninterrupted_run(
    store_factory: Callable[..., Any],
) -> None:
    online, later = store_factory(), store_factory()
    for store in (online, later):
        memory.seed_memory(store, load_seed())
    whole = _loop(online, ByStep(set())).run(_task())
    assert [s.status for s in whole.steps] == ["improved", "failed", "correct", "failed", "improved"]

    generator = ByStep({2, 4})
    first = _loop(later, generator).run(_task())
    assert first.stopped_reason == "awaiting_reply" and len(first.steps) == 1
    assert first.pending is not None and first.pending.step == 2 and first.confirmation == ""
    second = _loop(later, generator).run(
        _task(), resume=Resume(first.run_key, tuple(first.steps), first.pending)
    )
    assert second.pending is not None and second.pending.step == 4 and len(second.steps) == 3
    assert second.steps[0] == first.steps[0]
    third = _loop(later, generator).run(
        _task(), resume=Resume(second.run_key, tuple(second.steps), second.pending)
    )
    assert third.pending is None and third.stopped_reason == "5 steps done"
    assert generator.asked == [1, 2, 2, 3, 4, 4, 5]  # each awaited step asked again, with its saved request
    assert _comparable(third) == _comparable(whole)
    assert (third.best_step, third.best_speedup_x, third.best_source) == (
        whole.best_step, whole.best_speedup_x, whole.best_source,
    )  # fmt: skip
    # the memory learned the same: one run, five attempts, the same evidence
    a, b = memory.memory_summary(online), memory.memory_summary(later)
    assert a.labels == b.labels and a.relationships == b.relationships
    assert b.labels.get("Attempt") == 5 and b.labels.get("Run") == 1
