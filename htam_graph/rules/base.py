"""Shared types of the offline rule generator: applicability, kernel configurations, the recipe protocol.

A recipe is an executable local strategy: it checks whether it applies to a task's analysed forward and, if
so, writes a standalone `ModelNew` source with real Triton kernels. Every generated file starts with one
machine-readable header line (`# htam-rules: {...}`) naming the recipe and the `KernelConfig` it was written
with, so a tuning recipe can re-emit the current best kernel with another configuration.
"""

from __future__ import annotations

import functools
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from htam_graph.errors import HtamError
from htam_graph.model import PrecisionPolicy
from htam_graph.rules.ops import OpKind

if TYPE_CHECKING:
    from htam_graph.rules.analysis.skeleton import ModelSkeleton
    from htam_graph.rules.ops import OpGraph

P = TypeVar("P")
T = TypeVar("T")

HEADER_PREFIX = "# htam-rules: "
_HEADER_RE = re.compile(r"^# htam-rules: (\{.*\})\s*$", re.MULTILINE)


class NotApplicable(HtamError):
    """A recipe (or the analysis it needs) does not apply to a task; the message says why."""


def cached_by_source(fn: Callable[[str], T]) -> Callable[[str], T]:
    """`fn` with its results and its NotApplicable reasons cached by source (the last 128): every recipe
    asks for the same task's analysis. A cached reason is raised as a fresh NotApplicable each time; the
    cache keeps only its message, not the traceback whose frames would stay alive with it."""

    @functools.lru_cache(maxsize=128)
    def outcome(source: str) -> T | NotApplicable:
        try:
            return fn(source)
        except NotApplicable as e:
            return NotApplicable(str(e))

    @functools.wraps(fn)
    def cached(source: str) -> T:
        result = outcome(source)
        if isinstance(result, NotApplicable):
            raise NotApplicable(str(result))
        return result

    return cached


@dataclass(frozen=True)
class Applicability:
    """Whether a recipe applies to a task, and why not. Truthy when it applies."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok

    @classmethod
    def yes(cls) -> Applicability:
        return cls(True, "")

    @classmethod
    def no(cls, reason: str) -> Applicability:
        return cls(False, reason)


@dataclass(frozen=True)
class KernelConfig:
    """Launch parameters a generated kernel is written with (what tuning recipes vary).

    `block`: elements per program (elementwise) or the chunk width of a looped row reduction.
    `num_warps`: warps per program. `vector_hints`: emit `tl.multiple_of`/`tl.max_contiguous` hints on the
    flat offsets so loads and stores vectorise. `max_single_block`: the widest row a row kernel holds in
    registers in one block; longer rows use the looped (online) kernel.
    """

    block: int = 1024
    num_warps: int = 4
    vector_hints: bool = False
    max_single_block: int = 16384

    def __post_init__(self) -> None:
        for name in ("block", "max_single_block"):
            value = getattr(self, name)
            if value < 16 or value & (value - 1):
                raise ValueError(f"KernelConfig.{name} must be a power of two >= 16, got {value}")
        if self.num_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"KernelConfig.num_warps must be a power of two <= 32, got {self.num_warps}")

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> KernelConfig:
        """Build from a header's `config` object; unknown keys are ignored, bad values raise ValueError."""
        if not isinstance(data, dict):
            raise ValueError("config is not an object")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class RulesHeader:
    """What the `# htam-rules:` line of a generated source says."""

    recipe: str
    config: KernelConfig


def header_line(recipe_key: str, config: KernelConfig) -> str:
    """The machine-readable first line of a generated source."""
    return HEADER_PREFIX + json.dumps({"recipe": recipe_key, "config": config.to_json()}, sort_keys=True)


def parse_header(source: str) -> RulesHeader | None:
    """The header of a rules-generated source; None when the source was not written by a recipe."""
    match = _HEADER_RE.search(source)
    if match is None:
        return None
    try:
        data = json.loads(match.group(1))
        return RulesHeader(recipe=str(data["recipe"]), config=KernelConfig.from_json(data["config"]))
    except (ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class TaskView:
    """A task as the recipes see it: its analysed forward and the parts of its source ModelNew reuses."""

    task_key: str
    graph: OpGraph
    skeleton: ModelSkeleton
    # The run's precision policy: precision-changing recipes apply only under a non-strict one.
    precision_policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT


class Recipe(Protocol):
    """An executable local strategy."""

    key: str  # the LocalStrategy key it implements, e.g. fusion.elementwise_chain
    default_config: KernelConfig

    def check(self, view: TaskView) -> Applicability:
        """Whether this recipe can rewrite the task (never guesses: unknown ops make it not applicable)."""
        ...

    def emit(self, view: TaskView, config: KernelConfig) -> str:
        (
            """The complete ModelNew source; only called after `check` said yes. Raises NotApplicable """
            """otherwise."""
        )
        ...


class PlannedRecipe(ABC, Generic[P]):
    """A recipe in two stages: `plan` the rewrite of a task (or raise NotApplicable), then `render` the plan.

    `check` is "the plan succeeds", with the reason when it does not; `emit` renders a fresh plan. `probe` is
    work that `check` does beyond planning (writing a kernel once, say) so that an op the Triton rules cannot
    express fails at check time, not at emit time.
    """

    key: str  # the LocalStrategy key it implements
    default_config: KernelConfig
    # True: the recipe writes every op it does not replace as the reference's own call, so it accepts ops the
    # rules do not know (CALL nodes, analysis/calls.py); every other recipe is not applicable to them
    keeps_calls = False

    @abstractmethod
    def plan(self, view: TaskView) -> P:
        """What the rewrite of this task is; raises NotApplicable with the reason when there is none."""

    def probe(self, view: TaskView, plan: P) -> None:
        """Raise NotApplicable if the plan cannot be rendered (called by `check` only)."""

    @abstractmethod
    def render(self, view: TaskView, plan: P, config: KernelConfig) -> str:
        """The complete ModelNew source of the plan, written with `config`."""

    def check(self, view: TaskView) -> Applicability:
        try:
            self.probe(view, self._plan(view))
        except NotApplicable as e:
            return Applicability.no(str(e))
        return Applicability.yes()

    def emit(self, view: TaskView, config: KernelConfig) -> str:
        return self.render(view, self._plan(view), config)

    def _plan(self, view: TaskView) -> P:
        if not self.keeps_calls:
            called = [n.op for n in view.graph.nodes if n.kind is OpKind.CALL]
            if called:
                raise NotApplicable(f"{called[0]} is an op this recipe does not know (kept as a call)")
        return self.plan(view)
