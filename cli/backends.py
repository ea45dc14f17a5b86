"""The generator of `run` and `bench`: the `--backend` spec, the flags every LLM backend shares, and the
per-run wrapping (the run's reply box for replies that come later, the `--record` replay bank)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from htam_graph.model import PrecisionPolicy
from htam_graph.ports import Generator

__all__ = ["BACKEND_HELP", "LLMFlags", "llm_options", "make_backend", "run_generator"]

BACKEND_HELP = (
    'rules | anthropic[:MODEL] | openai:MODEL | llm:MODEL | command:"CMD ..." | files | '
    "batch:anthropic[:MODEL] | batch:openai:MODEL | replay:FILE (each described above)"
)

F = TypeVar("F", bound=Callable[..., Any])


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


def llm_options(command: F) -> F:
    """Add the LLM flags to a click command; it receives them as one `llm_flags: LLMFlags` argument."""
    options = [
        click.option("--llm-timeout", "llm_timeout_s", type=click.FloatRange(min=1), default=600.0,
                     show_default=True, help="Seconds to wait for one reply (a timed-out step is not re-sent)."),
        click.option("--max-tokens", type=click.IntRange(min=1), default=16384, show_default=True,
                     help="Output-token limit of one reply."),
        click.option("--temperature", type=click.FloatRange(min=0), default=None,
                     help="Sampling temperature (the provider's default when unset)."),
        click.option("--price", default=None, metavar="IN,OUT",
                     help="USD per million input,output tokens (or IN,OUT,CACHE_WRITE,CACHE_READ) for a model "
                     "without a known price; needed for --budget-usd then."),
        click.option("--record", "record_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="Append every (request, reply) to this replay file (replay it with --backend replay:FILE)."),
        click.option("--command-json", is_flag=True,
                     help="command: backend only: send the request as one JSON object instead of text."),
    ]  # fmt: skip

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs["llm_flags"] = LLMFlags(
            timeout_s=kwargs.pop("llm_timeout_s"),
            max_tokens=kwargs.pop("max_tokens"),
            temperature=kwargs.pop("temperature"),
            price=kwargs.pop("price"),
            record=kwargs.pop("record_path"),
            command_json=kwargs.pop("command_json"),
        )
        return command(*args, **kwargs)

    decorated: Any = wrapper
    for option in reversed(options):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


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
) -> tuple[Generator, str, Any]:
    """The generator for `--backend`, its model name, and the executable-locals hook (rules only).

    Rules only: `precision_policy` decides which recipes are executable (the precision track's only under a
    non-strict policy); `autotune_dir` holds the launch-configuration cache (None: remembered in this process
    only, as in benches, whose runs must stay independent); `device_name` is the GPU the cache is keyed by.
    LLM backends only: `ledger` (a `SpendLedger`) makes `budget_usd` a limit shared with every other tracker
    writing to that ledger (a bench's --budget-usd); `flags` are the LLM flags; `notify` is told of retries.
    """
    if spec == "rules":
        from htam_graph.rules import RulesGenerator
        from htam_graph.rules.autotune import AutotuneCache, Autotuner

        rules = RulesGenerator(autotuner=Autotuner(AutotuneCache(autotune_dir), device_name))
        return rules, "rules", functools.partial(rules.recipes_for, precision_policy=precision_policy)
    from htam_graph.llm.budget import BudgetTracker
    from htam_graph.llm.pricing import Price
    from htam_graph.llm.registry import make_generator
    from htam_graph.llm.retry import RetryPolicy

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
    )
    return generator, getattr(generator, "model", spec), None


def run_generator(generator: Generator, run_dir: Path | None, flags: LLMFlags | None) -> Generator:
    """The generator one run uses: behind the run's reply box (`RUN_DIR/pending/`) and, with `--record`,
    recording every reply it gets (saved replies included). The rules generator is used as it is."""
    if generator.name == "rules":
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
