"""The `--backend` help and the click options of the LLM flags `run` and `bench` share; the generator itself
is built by `htam_graph.generators`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from htam_graph.generators import LLMFlags

__all__ = ["BACKEND_HELP", "llm_options"]

BACKEND_HELP = (
    'rules | anthropic[:MODEL] | openai:MODEL | llm:MODEL | command:"CMD ..." | files | '
    "batch:anthropic[:MODEL] | batch:openai:MODEL | replay:FILE (each described above)"
)

F = TypeVar("F", bound=Callable[..., Any])


def llm_options(command: F) -> F:
    """Add the LLM flags to a click command; it receives them as one `llm_flags: LLMFlags` argument."""
    options = [
        click.option("--llm-timeout", "llm_timeout_s", type=click.FloatRange(min=1), default=600.0,
                     show_default=True,
                     help="Seconds to wait for one reply (a timed-out step is not re-sent)."),
        click.option("--max-tokens", type=click.IntRange(min=1), default=16384, show_default=True,
                     help="Output-token limit of one reply."),
        click.option("--temperature", type=click.FloatRange(min=0), default=None,
                     help="Sampling temperature (the provider's default when unset)."),
        click.option("--price", default=None, metavar="IN,OUT",
                     help="USD per million input,output tokens (or IN,OUT,CACHE_WRITE,CACHE_READ) for a "
                     "model without a known price; needed for --budget-usd then."),
        click.option("--record", "record_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="Append every (request, reply) to this replay file "
                     "(replay it with --backend replay:FILE)."),
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
