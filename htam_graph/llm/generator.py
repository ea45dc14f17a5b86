"""The one `Generator` every chat backend shares: budget check, prompt, bounded retries, code extraction.

A backend only supplies a `ChatClient` (one method: send a rendered prompt, return the text and its usage),
so retries, accounting, timing and extraction are written once and behave the same for every provider.
`reply_from_text` is the same reading of a reply for the backends whose replies arrive as text (replay files,
replies saved by hand, batch results).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from htam_graph.llm.budget import BudgetTracker
from htam_graph.llm.extract import extract_code, named_strategy
from htam_graph.llm.prompts import PromptTemplates, RenderedPrompt, load_templates, render_prompt
from htam_graph.llm.retry import RetryPolicy, call_with_retries
from htam_graph.model import GenerationReply, GenerationRequest, Usage

log = logging.getLogger(__name__)

# Stop reasons of a reply cut off at the output-token limit (Anthropic, OpenAI / vLLM, OpenAI Responses,
# Gemini).
TRUNCATED = frozenset({"max_tokens", "length", "max_output_tokens", "MAX_TOKENS"})


@dataclass(frozen=True)
class Completion:
    """One chat call's answer. `text` excludes reasoning (kept apart, never parsed as code)."""

    text: str
    model: str
    usage: Usage
    stop_reason: str = ""
    reasoning_chars: int = 0


class ChatClient(Protocol):
    """A provider connection. `complete` raises `TransientBackendError` for failures worth retrying,
    `StepInfraError` for a failure of this call only (the run goes on) and `BackendError` for the rest; it
    never retries itself."""

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

    def render(self, request: GenerationRequest) -> RenderedPrompt:
        """The prompt this generator sends for `request`."""
        if self._templates is None:
            self._templates = load_templates(self._templates_dir)
        return render_prompt(request, self._templates)

    def generate(self, request: GenerationRequest) -> GenerationReply:
        """Ask the model for the next candidate of `request`."""
        self.budget.check()
        prompt = self.render(request)
        calls = 0

        def call() -> Completion:
            nonlocal calls
            calls += 1
            return self.client.complete(prompt)

        started = time.perf_counter()
        completion = call_with_retries(call, self.retry, what=self.name)
        latency_s = time.perf_counter() - started
        self.budget.add(completion.usage)
        reply = reply_from_text(
            completion.text,
            model=completion.model,
            usage=completion.usage,
            stop_reason=completion.stop_reason,
            reasoning_chars=completion.reasoning_chars,
            latency_s=latency_s,
            attempts=calls,
        )
        if reply.error:
            log.info("%s step %d: no usable code: %s", self.name, request.step, reply.error)
        return reply


def reply_from_text(
    text: str,
    *,
    model: str,
    usage: Usage | None = None,
    stop_reason: str = "",
    reasoning_chars: int = 0,
    latency_s: float | None = None,
    attempts: int = 1,
) -> GenerationReply:
    """A model's raw reply read as a `GenerationReply`: the code, the named strategy, how the code was found
    (or why none was) and whether the reply was cut off at the token limit (flagged even when the code
    parses)."""
    result = extract_code(text)
    truncated = stop_reason in TRUNCATED
    error = None
    if result.source is None:
        notes = [result.reason]
        if truncated:
            tokens = f" ({usage.output_tokens} tokens)" if usage is not None and usage.output_tokens else ""
            notes.append(f"the reply was cut off at the max_tokens limit{tokens}")
        if reasoning_chars and not text.strip():
            notes.append(f"the model wrote {reasoning_chars} characters of reasoning but no answer")
        error = "; ".join(notes)
    return GenerationReply(
        source=result.source,
        raw_text=text,
        error=error,
        model=model,
        usage=usage or Usage(),
        strategy_key=named_strategy(text),
        extraction=result.reason,
        finish_reason=stop_reason,
        truncated=truncated,
        latency_s=latency_s,
        attempts=attempts,
    )
