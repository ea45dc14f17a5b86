"""What a run is configured with and what it returns: `RunConfig`, `StepOutcome`, `RunResult`, and the
policies (`PolicyName`).

Plain data, shared by the loop (`htam_graph/loop/`), the text it hands a generator (`state.py`), the CLI and
the bench. It imports nothing of the loop; the loop package re-exports these names, so
`from htam_graph.loop import RunConfig` works as well.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from htam_graph.errors import BackendError
from htam_graph.model import (
    Device,
    DirectionScore,
    ErrorKind,
    EvalRequest,
    EvalResult,
    GenerationRequest,
    Language,
    PrecisionPolicy,
    ShapeVariant,
    Task,
    Usage,
)

__all__ = [
    "POLICIES",
    "GenerationRecord",
    "PendingStep",
    "PolicyName",
    "Resume",
    "RunConfig",
    "RunResult",
    "StepOutcome",
]


class PolicyName(StrEnum):
    """The loop's policies (`--policy`): the full method and its ablations. A member is its CLI string
    (`PolicyName("no-local") is PolicyName.NO_LOCAL`, `f"{PolicyName.HTAM}" == "htam"`)."""

    HTAM = "htam"  # global directions by precedent aggregation, then a local strategy under them
    FLAT = "flat"  # retrieval of the most similar past attempts, no hierarchy
    NO_TRANSITION = "no-transition"  # directions by their own statistics only
    NO_LOCAL = "no-local"  # the direction only, no local memory
    RANDOM = "random"  # uniform directions and strategies


POLICIES: tuple[PolicyName, ...] = tuple(PolicyName)


@dataclass(frozen=True)
class RunConfig:
    """How one run is carried out (all of it recorded on the Run node)."""

    steps: int = 6
    policy: PolicyName = PolicyName.HTAM
    device: Device = "cuda"
    shape: ShapeVariant = "default"
    language: Language = Language.TRITON
    precision_policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT
    seed: int = 0
    timeout_s: float = 600.0
    trials: int = 5
    timing_runs: int | None = None  # None: 20 on a GPU; 3 on the CPU, where timings are never claims
    record: bool = True  # False: a frozen memory (read, never written)
    # Before a run returns a kernel, it is checked again on fresh seeds (`confirm_trials` trials; None: 10 on
    # a GPU, 0 on the CPU): a kernel at the edge of the tolerance can pass one evaluation in several, so five
    # trials may let it through by luck. A kernel that fails its confirmation is not returned (the next best
    # is tried).
    confirm_trials: int | None = None

    def __post_init__(self) -> None:
        # A policy given by its CLI string becomes the member, so the loop compares members only; an unknown
        # name raises ValueError here, not in the middle of a run.
        object.__setattr__(self, "policy", PolicyName(self.policy))

    def eval_request(
        self, task: Task, source: str, *, seed: int, trials: int, measure_baselines: bool
    ) -> EvalRequest:
        """The evaluation of one candidate of this run (a step, or a confirmation with its own seed and
        trials)."""
        return EvalRequest(
            task_key=task.key,
            task_source=task.source,
            candidate_source=source,
            device=self.device,
            shape=self.shape,
            precision_policy=self.precision_policy,
            trials=trials,
            timing_runs=self.timed_runs,
            warmup_runs=self.warmup_runs,
            timeout_s=self.timeout_s,
            seed=seed,
            measure_baselines=measure_baselines,
        )

    @property
    def warmup_runs(self) -> int:
        """Warm-up calls before timing: 3 on a GPU; 1 on the CPU, where each interpreted call costs seconds
        and the timings are never claims."""
        return 3 if self.device == "cuda" else 1

    @property
    def timed_runs(self) -> int:
        """`timing_runs`, or its default for the device: 20 on a GPU, 3 on the CPU."""
        return self.timing_runs or (20 if self.device == "cuda" else 3)


@dataclass(frozen=True)
class GenerationRecord:
    """How a step's candidate was generated: what the policy offered, what the reply chose, and how it came.

    `chosen` is the local strategy the attempt is credited to: the drawn one when the reply names none, the
    named one when it was offered or exists in the memory, "unknown" for a key the memory does not hold (the
    attempt then counts for the direction only), "none" when the model answered that no strategy applies.
    """

    offered: tuple[str, ...]  # the drawn local first, then the alternatives
    named: str | None  # the key on the reply's STRATEGY line, as written
    chosen: str | None
    extraction: str
    finish_reason: str
    truncated: bool
    latency_s: float | None
    attempts: int
    model: str
    infra_error: bool = False
    raw_text: str = ""  # the model's reply as it came (saved as candidates/step_N.reply.md, not in the row)


@dataclass(frozen=True)
class StepOutcome:
    """What happened at one step (also what `trajectory.json` holds)."""

    step: int
    global_key: str
    local_key: str | None
    direction_probability: float
    status: Literal["improved", "correct", "failed"]
    error_kind: ErrorKind | None
    error_excerpt: str
    speedup_x: float | None
    best_speedup_x: float
    gain: float
    source: str | None
    result: EvalResult | None
    usage: Usage
    attempt_key: str
    generation: GenerationRecord | None = None  # None for steps read back from an older trajectory


@dataclass(frozen=True)
class PendingStep:
    """A step whose request was made but whose reply has not come yet (the run stopped `awaiting_reply`).

    It holds everything the loop needs to continue exactly where it stopped: the request as sent, the
    direction the policy drew for it, and the policy's random state after that draw (so the steps after it
    draw what an uninterrupted run would have drawn). `prompt` is the rendered request (system, memory, user).
    """

    step: int
    request: GenerationRequest
    direction: DirectionScore
    rng_state: tuple[object, ...]
    prompt: dict[str, str]
    backend: str = ""


@dataclass(frozen=True)
class Resume:
    """A run cut after `len(steps)` steps (a bench device call ended mid-run, or it stopped awaiting a reply):
    its key and the steps it made, read back from its trajectory. The memory already holds those steps'
    attempts. With `pending`, the run continues at that step with its saved request and random state."""

    run_key: str
    steps: tuple[StepOutcome, ...]
    pending: PendingStep | None = None


@dataclass
class RunResult:
    """The run's outcome: the best correct candidate (or the reference) and every step."""

    run_key: str
    task_key: str
    best_source: str
    best_is_reference: bool
    best_step: int | None
    best_speedup_x: float
    best_result: EvalResult | None
    steps: list[StepOutcome] = field(default_factory=list)
    stopped_reason: str = ""
    backend_error: BackendError | None = None
    # Set when the run stopped awaiting a reply (stopped_reason "awaiting_reply").
    pending: PendingStep | None = None
    ref_compile_us: float | None = None  # torch.compile baseline, measured once per run (first timed step)
    ref_eager_us: float | None = None  # the eager reference as timed beside the first timed candidate
    first_result: EvalResult | None = None  # where the run was measured (GPU, torch, tolerance), any outcome
    # How the returned kernel was confirmed on fresh seeds (or why candidates were dropped).
    confirmation: str = ""

    @property
    def best_speedup_compile_x(self) -> float | None:
        """Speed-up of the returned kernel over torch.compile (the reference's own ratio when it is
        returned)."""
        if self.ref_compile_us is None:
            return None
        if self.best_is_reference or self.best_result is None or not self.best_result.runtime_us:
            return self.ref_compile_us / self.ref_eager_us if self.ref_eager_us else None
        return self.ref_compile_us / self.best_result.runtime_us

    @property
    def usage(self) -> Usage:
        """Tokens and dollars summed over the steps."""
        total = Usage()
        for s in self.steps:
            u = s.usage
            total = Usage(
                input_tokens=total.input_tokens + u.input_tokens,
                output_tokens=total.output_tokens + u.output_tokens,
                cache_read_tokens=total.cache_read_tokens + u.cache_read_tokens,
                cache_write_tokens=total.cache_write_tokens + u.cache_write_tokens,
                cost_usd=total.cost_usd + u.cost_usd,
                cost_known=total.cost_known and u.cost_known,
            )
        return total
