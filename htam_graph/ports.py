"""The ports the orchestration layer depends on. Adapters implement them; nothing here does I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from htam_graph.devicefacts import GpuFacts
from htam_graph.model import EvalRequest, EvalResult, GenerationReply, GenerationRequest

Dialect = Literal["falkordb", "neo4j"]


class StoreHealth(BaseModel):
    """What `health()` reports."""

    model_config = ConfigDict(frozen=True)

    ok: bool
    dialect: Dialect
    location: str  # socket path or URI (never a password)
    server_version: str = ""
    schema_version: int | None = None
    detail: str = ""


@runtime_checkable
class GraphStore(Protocol):
    """A graph database that runs the named Cypher files of `htam_graph.cypher`.

    Values are passed only as parameters. Each call is one statement (atomic on both engines).
    """

    dialect: Dialect

    def run(self, name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run the named query with parameters; return its rows as dicts keyed by column."""
        ...

    def apply_schema(self) -> int:
        """Apply this dialect's schema and migrations (idempotent); return the schema version."""
        ...

    def health(self) -> StoreHealth:
        """Check the connection and report where the store is."""
        ...

    def close(self) -> None:
        """Release the connection (the embedded server keeps running)."""
        ...


@runtime_checkable
class Evaluator(Protocol):
    """Compiles, checks and times one candidate against its task's reference."""

    def evaluate(self, request: EvalRequest) -> EvalResult: ...


@runtime_checkable
class FactsProvider(Protocol):
    """Optional, for an evaluator that can describe the device and the task's reference on it (`GpuFacts`: GPU
    model, versions, input shapes, the reference's time, floor and kernels, the profile and an ncu summary of
    the request's candidate). The loop asks before the first step of an LLM run and whenever the best kernel
    changes on a GPU; None means the facts could not be measured (the prompts then go without them)."""

    def device_facts(self, request: EvalRequest) -> GpuFacts | None: ...


@runtime_checkable
class Generator(Protocol):
    """Produces the next candidate source (an LLM backend, a replay file, or the offline rules)."""

    name: str

    def generate(self, request: GenerationRequest) -> GenerationReply: ...


@runtime_checkable
class EvaluationObserver(Protocol):
    """Optional, for a generator that learns from the evaluation of its own candidates.

    The offline rules implement it to fill their autotune cache with the runtimes the loop measured (the loop
    calls it after every evaluated step of a recording run; a frozen memory observes nothing).
    """

    def observe(
        self, request: GenerationRequest, reply: GenerationReply, result: EvalResult | None
    ) -> None: ...


@runtime_checkable
class ResumableGenerator(Protocol):
    """Optional, for a generator whose answer depends on what it answered before (a replay file consumes its
    records): a resumed run tells it which of its steps were answered by an earlier invocation."""

    def resumed(self, task_key: str, steps: Sequence[int]) -> None: ...


@runtime_checkable
class RecordedChoices(Protocol):
    """Optional, for a generator that replays a recorded run: the direction and strategy the recorded run took
    at a step. The loop takes them instead of drawing, so a replay asks what the recorded run asked."""

    def recorded_choice(self, task_key: str, step: int) -> tuple[str, str | None] | None: ...
