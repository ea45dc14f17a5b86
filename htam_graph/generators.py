"""The generator of `run` and `bench`, built from a `--backend` spec through one registry.

Every backend, the offline `rules` generator included, is a factory in the registry of
`htam_graph.llm.registry` (`register_backend`). This module is the composition root that knows both adapters:
it registers `rules` there (the llm and rules packages never import each other), holds the LLM flags `run` and
`bench` share, and wraps the generator of one run (its reply box, the `--record` replay bank).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from htam_graph.errors import BackendError
from htam_graph.llm.budget import BudgetTracker
from htam_graph.llm.pricing import Price
from htam_graph.llm.registry import BackendOptions, make_generator, register_backend
from htam_graph.llm.retry import RetryPolicy
from htam_graph.model import Device, Language, PrecisionPolicy, Task
from htam_graph.ports import Generator

__all__ = ["LLMFlags", "make_backend", "run_generator"]


@dataclass(frozen=True)
class LLMFlags:
    """The LLM flags of `run` and `bench` (picklable: a bench job carries them to its worker)."""

    timeout_s: float = 600.0
    max_tokens: int = 16384
    temperature: float | None = None
    price: str | None = None  # IN,OUT[,CACHE_WRITE,CACHE_READ] USD per million tokens, as given
    record: Path | None = None
    command_json: bool = False

    def args(self) -> list[str]:
        """These flags as command-line arguments (the bench's recorded command), defaults left out."""
        out: list[str] = []
        if self.timeout_s != 600.0:
            out += ["--llm-timeout", f"{self.timeout_s:g}"]
        if self.max_tokens != 16384:
            out += ["--max-tokens", str(self.max_tokens)]
        if self.temperature is not None:
            out += ["--temperature", f"{self.temperature:g}"]
        if self.price:
            out += ["--price", self.price]
        if self.record:
            out += ["--record", str(self.record)]
        if self.command_json:
            out.append("--command-json")
        return out


@runtime_checkable
class ExecutesRecipes(Protocol):
    """A generator that can only write the local strategies it has a recipe for (the rules generator): the
    loop then chooses among those only."""

    def recipes_for(
        self,
        task: Task,
        device: Device = ...,
        language: Language = ...,
        precision_policy: PrecisionPolicy = ...,
    ) -> list[str]:
        """The local keys with a recipe that applies to `task`."""
        ...


def _rules(options: BackendOptions) -> Generator:
    from htam_graph.rules import RulesGenerator
    from htam_graph.rules.autotune import AutotuneCache, Autotuner

    if options.argument:
        raise BackendError(f"the rules backend takes no argument (got rules:{options.argument})")
    return RulesGenerator(autotuner=Autotuner(AutotuneCache(options.autotune_dir), options.device_name))


register_backend("rules", _rules)


def make_backend(
    spec: str,
    budget_usd: float | None,
    base_url: str | None,
    *,
    precision_policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT,
    autotune_dir: Path | None = None,
    device_name: str = "",
    ledger: Any = None,
    flags: LLMFlags | None = None,
    notify: Callable[[str], None] | None = None,
) -> tuple[Generator, str, Callable[[Task], Sequence[str]] | None]:
    """The generator for `--backend`, its model name, and the executable-locals hook (rules only).

    Rules only: `precision_policy` decides which recipes are executable (the precision track's only under a
    non-strict policy); `autotune_dir` holds the launch-configuration cache (None: remembered in this process
    only, as in benches, whose runs must stay independent); `device_name` is the GPU the cache is keyed by.
    LLM backends only: `ledger` (a `SpendLedger`) makes `budget_usd` a limit shared with every other tracker
    writing to that ledger (a bench's --budget-usd); `flags` are the LLM flags; `notify` is told of retries.
    """
    flags = flags or LLMFlags()
    generator = make_generator(
        spec,
        env=os.environ,
        base_url=base_url,
        budget=BudgetTracker(budget_usd, ledger),
        retry=RetryPolicy(notify=notify),
        price=Price.parse(flags.price) if flags.price else None,
        max_tokens=flags.max_tokens,
        timeout_s=flags.timeout_s,
        temperature=flags.temperature,
        command_json=flags.command_json,
        precision_policy=precision_policy,
        autotune_dir=autotune_dir,
        device_name=device_name,
    )
    if isinstance(generator, ExecutesRecipes):
        executable = functools.partial(generator.recipes_for, precision_policy=precision_policy)
        return generator, generator.name, executable
    return generator, getattr(generator, "model", spec), None


def run_generator(generator: Generator, run_dir: Path | None, flags: LLMFlags | None) -> Generator:
    """The generator one run uses: behind the run's reply box (`RUN_DIR/pending/`) and, with `--record`,
    recording every reply it gets (saved replies included). A recipe generator is used as it is."""
    if isinstance(generator, ExecutesRecipes):
        return generator
    from htam_graph.llm.deferred import InboxGenerator
    from htam_graph.llm.pending import PENDING_DIR
    from htam_graph.llm.replay import RecordingGenerator

    wrapped: Generator = generator
    if run_dir is not None:
        wrapped = InboxGenerator(wrapped, run_dir / PENDING_DIR)
    if flags is not None and flags.record is not None:
        wrapped = RecordingGenerator(wrapped, flags.record)
    return wrapped
