"""Data that crosses a boundary (graph rows, runtime requests/results, generator requests/replies).

Pydantic models, frozen where they are values. Property names equal the graph property names (snake_case).
Units are in the names: `runtime_us`, `timeout_s`, `speedup_x`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from htam_graph.devicefacts import GpuFacts


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Language(StrEnum):
    """Kernel language a candidate (or a strategy) uses."""

    CUDA = "cuda"
    TRITON = "triton"


class PrecisionPolicy(StrEnum):
    """What numeric shortcuts a candidate may take. Results of different policies are separate tracks."""

    FP32_STRICT = "fp32-strict"  # TF32 off on both sides; fp32 tolerance
    TF32 = "tf32"  # TF32 matmul/conv allowed (recorded as a separate track)
    BF16 = "bf16"  # bf16/fp16 compute allowed (separate track)


class ErrorKind(StrEnum):
    """Why a candidate failed. A failed candidate is data, never an exception."""

    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    MISMATCH = "mismatch"
    TIMEOUT = "timeout"
    CRASH = "crash"
    HACK_DETECTED = "hack_detected"
    UNSUPPORTED_ON_DEVICE = "unsupported_on_device"
    INFRA_ERROR = "infra_error"
    NO_CODE = "no_code"  # the generator produced no usable code


Device = Literal["cpu", "cuda"]
ShapeVariant = Literal["default", "smoke"]


# ----------------------------------------------------------------------------------------------- memory (HTG)
class GlobalDirection(_Frozen):
    """A coarse optimisation direction (the paper's V_G)."""

    key: str
    name: str
    intent: str
    goals: list[str] = Field(default_factory=list)
    triggers: list[str] = Field(default_factory=list)
    risks: list[str] = Field(default_factory=list)


class LocalStrategy(_Frozen):
    """A concrete strategy refining one global direction (the paper's V_GL)."""

    key: str
    name: str
    global_key: str
    languages: list[Language]
    pattern: str  # what to change in the code
    applicable_when: list[str] = Field(default_factory=list)  # prose conditions
    op_tags: list[str] = Field(default_factory=list)  # task op tags it applies to; empty = any
    # The strategy's defining operation when it is a combination (a library GEMM/conv AND an epilogue): the
    # task must have one of these tags, and one of its other op_tags too (`policy.applies`). Empty: op_tags
    # decide.
    requires_tags: list[str] = Field(default_factory=list)
    checks: list[str] = Field(default_factory=list)  # how to verify it worked
    risks: list[str] = Field(default_factory=list)  # what can go wrong


class TransitionPrior(_Frozen):
    """A prior transition between two directions, with its rationale (seeds the paper's E_G)."""

    src: str
    dst: str
    rationale: str
    risks: list[str] = Field(default_factory=list)
    applicable_when: list[str] = Field(default_factory=list)


class SeedMemory(_Frozen):
    """The reviewable seed file (`htam_graph/data/seed_memory.yaml`)."""

    version: int
    globals: list[GlobalDirection]
    locals: list[LocalStrategy]
    transitions: list[TransitionPrior] = Field(default_factory=list)


class DirectionScore(_Frozen):
    """One candidate next direction as scored by the policy."""

    key: str
    score: float
    support: int
    probability: float = 0.0


# ----------------------------------------------------------------------------------------------- tasks
class Task(_Frozen):
    """A PyTorch reference module in KernelBench form (`Model`, `get_inputs`, `get_init_inputs`)."""

    key: str  # e.g. kernelbench/level1/19_ReLU
    suite: str  # e.g. kernelbench
    level: int | None
    name: str
    source: str
    source_sha256: str
    op_tags: list[str] = Field(default_factory=list)
    path: str | None = None


# ----------------------------------------------------------------------------------------------- runtime
class EvalRequest(_Frozen):
    """One candidate to check and time against a task's reference."""

    task_key: str
    task_source: str
    candidate_source: str
    device: Device = "cuda"
    shape: ShapeVariant = "default"
    precision_policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT
    rtol: float | None = None  # None: the policy's default (fp32 1e-4, fp16/bf16 1e-2)
    atol: float | None = None
    trials: int = Field(default=5, ge=1)
    extra_shapes: int = Field(default=1, ge=0)
    timing_runs: int = Field(default=20, ge=1)
    warmup_runs: int = Field(default=3, ge=0)
    timeout_s: float = Field(default=600.0, gt=0)
    measure_baselines: bool = True
    seed: int = 0
    # "kernel": a custom kernel must launch (kernel strategies). "reference": the trusted reference track
    # (e.g. the reference copied as ModelNew); kernel-required checks are skipped and recorded as skipped.
    candidate_kind: Literal["kernel", "reference"] = "kernel"


class EvalResult(_Frozen):
    """What the runtime saw. Every claimed number carries its GPU, torch version, policy and tolerance."""

    compiled: bool
    correct: bool
    error_kind: ErrorKind | None = None
    error_excerpt: str = ""
    checks: dict[str, str] = Field(
        default_factory=dict
    )  # named defence -> "pass" / "fail: why" / "skipped: why"
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    runtimes_us: list[float] = Field(default_factory=list)
    runtime_us: float | None = None  # median
    runtime_spread_us: float | None = None  # interquartile range
    ref_eager_us: float | None = None
    ref_compile_us: float | None = None
    speedup_eager_x: float | None = None
    speedup_compile_x: float | None = None
    sol_us: float | None = None  # speed-of-light floor estimate
    sol_flagged: bool = False
    device: Device = "cuda"
    timing_on_cpu: bool = False  # CPU timings are recorded but are not GPU claims
    # How the times were taken, the protocol of kernels_runtime/worker/timing_protocol.py:
    # head_start, sync_in_window or cpu_perf_counter.
    timing_method: str = ""
    gpu_name: str = ""
    gpu_arch: str = ""  # e.g. sm_90; "cpu" on the CPU
    torch_version: str = ""
    precision_policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT
    rtol: float = 1e-4
    atol: float = 1e-4
    shape_variant: str = "default"
    language: Language | None = None
    compile_s: float | None = None
    wall_s: float | None = None
    # The task's reference output is degenerate (near-constant, ~zero, input-independent or an input echoed):
    # a correct candidate proves little there, so wins on it must not be counted (evaluation.md pitfall 9).
    task_degenerate: bool = False
    # The reference output was within tolerance of zeros or a constant, so every comparison used atol
    # scaled to the output (atol x max|reference| per output, kernels_runtime/worker/tinyout.py): the largest
    # absolute tolerance so applied. None: the request's tolerance (`atol`) was used.
    scaled_atol: float | None = None


# ----------------------------------------------------------------------------------------------- outcomes
class AttemptRecord(_Frozen):
    """One optimisation step's outcome, written back to the HTG (stats, evidence, transition, records)."""

    key: str  # unique attempt key
    run_key: str
    task_key: str
    step: int
    global_key: str
    local_key: str | None = None
    prev_global_key: str | None = None
    prev_attempt_key: str | None = None
    status: Literal["improved", "correct", "failed"]
    error_kind: ErrorKind | None = None
    compiled: bool
    correct: bool
    speedup_x: float | None = None  # over the eager reference
    gain: float = 0.0  # ln(speedup / best speedup before this step); 0.0 when not correct
    runtime_us: float | None = None
    gpu_name: str = ""
    gpu_arch: str = ""
    precision_policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT
    kernel_language: Language | None = None
    kernel_source: str | None = None
    kernel_sha256: str | None = None
    created_ms: int = 0
    # Where the candidate ran. A CPU attempt (Triton interpreted, timings meaningless) is recorded but is
    # never evidence (memory.is_evidence); None on records written before the field existed (gpu_arch 'cpu'
    # says it).
    device: Device | None = None


class RunRecord(_Frozen):
    """One optimisation run of one task (the `(:Run)` node its attempts point to)."""

    key: str
    task_key: str
    backend: str = ""  # generator name: anthropic, openai, rules, replay, ...
    policy: str = ""  # htg, no-transition, random, flat
    model: str = ""
    started_ms: int = 0
    gpu_name: str = ""
    gpu_arch: str = ""
    precision_policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT
    seed: int = 0


class ArchEvidence(_Frozen):
    """What the attempts that applied one local strategy on one GPU architecture came to (never CPU
    attempts)."""

    gpu_arch: str
    improved: int = 0  # correct and faster than the run's best
    correct: int = 0  # correct but not faster: its own label, never "failed"
    failed: int = 0  # compile error, mismatch, crash, timeout, hack, no code
    gain_sum: float = 0.0

    @property
    def attempts(self) -> int:
        return self.improved + self.correct + self.failed


class LocalWithEvidence(_Frozen):
    """A local strategy with the evidence the memory holds for it (totals over all GPU architectures).

    `by_arch` is filled only where evidence is shown (the strategies offered to a generator)."""

    strategy: LocalStrategy
    attempts: int = 0
    positives: int = 0
    negatives: int = 0
    gain_sum: float = 0.0
    best_attempt_key: str | None = None  # best positive attempt (highest gain), for examples
    best_kernel_key: str | None = None
    worst_attempt_key: str | None = None  # worst negative attempt (lowest gain), for counter-examples
    worst_kernel_key: str | None = None
    by_arch: list[ArchEvidence] = Field(default_factory=list)

    @property
    def mean_gain(self) -> float:
        """Mean gain per recorded attempt (0.0 without evidence)."""
        return self.gain_sum / self.attempts if self.attempts else 0.0


class AttemptExample(_Frozen):
    """A past attempt shown to the generator as an example (positive) or a counter-example (negative)."""

    attempt_key: str
    task_key: str
    global_key: str
    local_key: str | None = None
    positive: bool
    status: str
    error_kind: str | None = None
    gain: float = 0.0
    speedup_x: float | None = None
    gpu_arch: str = ""
    kernel_key: str | None = None
    language: str | None = None
    source: str | None = None


# ----------------------------------------------------------------------------------------------- generation
class Usage(_Frozen):
    """Tokens and dollars one generator call cost."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True  # False: the model has no known price, so cost_usd (0.0) is not a real cost


class GenerationRequest(_Frozen):
    """What a generator (LLM backend or the offline rules) gets for one step."""

    task: Task
    step: int
    direction: GlobalDirection
    strategy: LocalStrategy | None
    base_source: str  # the current best candidate (or the reference re-written as ModelNew)
    language: Language
    state_summary: str  # task, last feedback, recent trajectory, as text
    memory_context: str = ""  # the strategy's memory: pattern, checks, evidence, examples (stable, cacheable)
    device: Device = "cuda"
    seed: int = 0
    precision_policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT  # what numeric shortcuts are allowed
    shape: ShapeVariant = "default"  # the input sizes the candidate will be evaluated at (autotune cache key)
    # Other local strategies under the direction: an LLM may choose one of them instead of `strategy`
    # (the paper's local choice by the LLM) and says which in its reply (`GenerationReply.strategy_key`).
    alternatives: list[LocalStrategy] = Field(default_factory=list)
    # Facts about the device and the task's reference there (GPU model, versions, input shapes, reference
    # time, speed-of-light floor, eager profile, ncu summary of the best kernel), measured by the evaluator
    # side.
    gpu_facts: GpuFacts | None = None


NO_STRATEGY_KEY = "none"  # what a reply's STRATEGY line reads as when the model says no strategy applies


class GenerationReply(_Frozen):
    """A generator's answer: code (or why there is none) and what it cost."""

    source: str | None
    raw_text: str = ""
    error: str | None = None
    model: str = ""
    usage: Usage = Field(default_factory=Usage)
    # The strategy key the reply names on its `STRATEGY:` line, as written ("none": no applicable strategy);
    # the loop decides what it means (an offered one, another one in the memory, or unknown).
    strategy_key: str | None = None
    extraction: str = ""  # how the code was found in the reply, or why none was
    finish_reason: str = ""  # the provider's stop reason (end_turn, stop, max_tokens, length, ...)
    truncated: bool = False  # the reply hit the output-token limit (flagged even when its code parses)
    latency_s: float | None = None  # wall time from the request to the reply, retries included
    attempts: int = 1  # calls made for this reply (1 + retries)
    infra_error: bool = False  # no reply because the backend failed (not the model's answer): no evidence
