"""What one run of the loop works with: the ports and settings it was built with (`RunContext`, the same for
every run of an `OptimizationLoop`), the state it carries from step to step (`RunState`, one per run), and
what the policy picked for one step (`Choice`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from htam_graph import memory
from htam_graph.devicefacts import GpuFacts
from htam_graph.model import (
    AttemptExample,
    AttemptRecord,
    DirectionScore,
    GlobalDirection,
    LocalStrategy,
    LocalWithEvidence,
    Task,
)
from htam_graph.ports import Evaluator, Generator, GraphStore
from htam_graph.run_lessons import RunLessons
from htam_graph.runtypes import RunConfig, RunResult
from htam_graph.settings import PolicySettings

__all__ = ["Choice", "ExecutableLocals", "RunContext", "RunState"]

ExecutableLocals = Callable[[Task], Sequence[str]]
"""For generators that can act on some strategies only (the offline rules): the local keys they can
execute."""


@dataclass(frozen=True)
class RunContext:
    """The ports and settings of a loop; `on_phase(step, phase)` is told when a step starts "generating"
    (waiting for the generator) and "evaluating" (the candidate is checked and timed)."""

    store: GraphStore
    evaluator: Evaluator
    generator: Generator
    settings: PolicySettings
    config: RunConfig
    on_phase: Callable[[int, str], None] | None = None

    def phase(self, step: int, name: str) -> None:
        if self.on_phase is not None:
            self.on_phase(step, name)


@dataclass
class RunState:
    """One run, step to step: what it returns so far (`result`), where the policy stands, and what the run
    has learnt about its own candidates."""

    task: Task
    run_key: str
    rng: random.Random  # every draw of the policy (seeded: a run is reproducible)
    result: RunResult
    reference: str  # the task's reference as a `ModelNew` candidate: the start and the fallback
    directions: dict[str, GlobalDirection]  # every global direction in the memory, by key
    executable: set[str] | None  # the local keys the generator can execute (the rules); None: any (an LLM)
    recorder: memory.Recorder  # this run's writer into the memory
    lessons: RunLessons  # this run's own failures (run_lessons.py)
    allowed: list[str] = field(default_factory=list)  # directions with a strategy that fits the task
    history: list[str] = field(default_factory=list)  # the direction of every step so far
    gpu_arch: str = ""  # whose evidence the policy weighs: the last evaluation's, else the device facts'
    prev_attempt: str | None = None  # the attempt key of the last step
    evaluated: set[str] = field(default_factory=set)  # sha256 of every candidate evaluated in this run
    facts: GpuFacts | None = None  # the device facts (LLM generators only), refreshed with the best
    infra_in_a_row: int = 0  # steps in a row whose generator call failed
    # `memory.locals_for` per direction, read once until the run records an attempt (which changes their
    # evidence): the allowed directions, the demotion check and the choice of a step all read the same rows.
    locals_read: dict[str, list[LocalWithEvidence]] = field(default_factory=dict)
    # Every local strategy in the memory by lower-cased key, read once a run when a reply names one that
    # was not offered.
    known_locals: dict[str, LocalStrategy] | None = None

    def record(self, record: AttemptRecord) -> None:
        """Write an attempt to the memory; the local strategies read so far are read again after it."""
        self.recorder.record_attempt(record)
        self.locals_read.clear()


@dataclass
class Choice:
    """What the policy picked for one step, and what the reply credited."""

    direction: DirectionScore
    local: LocalWithEvidence | None
    examples: list[AttemptExample]
    alternatives: list[LocalWithEvidence] = field(default_factory=list)
    # Set when the request is made: the drawn local first, then the alternatives.
    offered: tuple[str, ...] = ()
    chosen: str | None = None  # what the attempt is credited to (see GenerationRecord.chosen)
