"""The one `Generator` every chat backend shares: budget check, prompt, bounded retries, code extraction.

A backend only supplies a `ChatClient` (one method: send a rendered prompt, return the text and its usage),
so retries, accounting and extraction are written once and behave the same for every provider.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from htam_graph.llm.budget import BudgetTracker
from htam_graph.llm.extract import extract_code
from htam_graph.llm.prompts import PromptTemplates, RenderedPrompt, load_templates, render_prompt
from htam_graph.llm.retry import RetryPolicy, call_with_retries
from htam_graph.model import GenerationReply, GenerationRequest, Usage

log = logging.getLogger(__name__)

_TRUNCATED = {"max_tokens", "length"}  # Anthropic / OpenAI stop reasons for a cut-off reply


@dataclass(frozen=True)
class Completion:
    """One chat call's answer. `text` excludes reasoning (kept apart, never parsed as code)."""

    text: str
    model: str
    usage: Usage
    stop_reason: str = ""
    reasoning_chars: int = 0


class ChatClient(Protocol):
    """A provider connection. `complete` raises `TransientBackendError` for failures worth retrying and
    `BackendError` for the rest; it never retries itself."""

    provider: str
    model: str

    def complete(self, prompt: RenderedPrompt) -> Completion: ...


class LLMGenerator:
    """A `Generator` over a `ChatClient`.

    - `BudgetExceeded` is raised before a call when the run's budget is spent;
    - transport failures are retried per `retry`, then raised as `BackendError` (an infrastructure failure);
    - a reply without usable code is a `GenerationReply` with `source=None` and `error` set, never an
      exception (its cost is still counted).
    """

    def __init__(
        self,
        client: ChatClient,
        *,
        budget: BudgetTracker | None = None,
        retry: RetryPolicy | None = None,
        templates: PromptTemplates | None = None,
        templates_dir: Path | None = None,
    ) -> None:
        self.client = client
        self.name = f"{client.provider}:{client.model}"
        self.budget = budget or BudgetTracker()
        self.retry = retry or RetryPolicy()
        self._templates = templates
        self._templates_dir = templates_dir

    def generate(self, request: GenerationRequest) -> GenerationReply:
        """Ask the model for the next candidate of `request`."""
        self.budget.check()
        if self._templates is None:
            self._templates = load_templates(self._templates_dir)
        prompt = render_prompt(request, self._templates)
        completion = call_with_retries(lambda: self.client.complete(prompt), self.retry, what=self.name)
        self.budget.add(completion.usage)
        result = extract_code(completion.text)
        error = None if result.source is not None else _explain(result.reason, completion)
        if error:
            log.info("%s step %d: no usable code: %s", self.name, request.step, error)
        return GenerationReply(
            source=result.source,
            raw_text=completion.text,
            error=error,
            model=completion.model,
            usage=completion.usage,
            strategy_key=chosen_strategy(completion.text, request),
        )


_STRATEGY_LINE = re.compile(r"^\s*\**STRATEGY\**\s*:\s*\**\s*`?([A-Za-z0-9_.]+)`?", re.MULTILINE)


def chosen_strategy(text: str, request: GenerationRequest) -> str | None:
    """The `STRATEGY: <key>` the model named, when it is one of the strategies it was offered."""
    offered = {s.key for s in request.alternatives}
    if request.strategy is not None:
        offered.add(request.strategy.key)
    m = _STRATEGY_LINE.search(text)
    return m.group(1) if m and m.group(1) in offered else None


def _explain(reason: str, completion: Completion) -> str:
    notes = [reason]
    if completion.stop_reason in _TRUNCATED:
        notes.append(
            f"the reply was cut off at the max_tokens limit ({completion.usage.output_tokens} tokens)"
        )
    if completion.reasoning_chars and not completion.text.strip():
        notes.append(f"the model wrote {completion.reasoning_chars} characters of reasoning but no answer")
    return "; ".join(notes)
