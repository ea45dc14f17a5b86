"""A scripted chat model for tests: the same `LLMGenerator` path as the real backends, replies from a list.

Register it through the real registry (`register_backend("scripted", scripted_factory(replies))`) so tests
exercise the wiring that `make_generator` uses for the real providers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from htam_graph.errors import BackendError
from htam_graph.llm.budget import BudgetTracker
from htam_graph.llm.generator import Completion, LLMGenerator
from htam_graph.llm.prompts import RenderedPrompt
from htam_graph.llm.retry import RetryPolicy
from htam_graph.model import Usage

if TYPE_CHECKING:
    from htam_graph.llm.registry import BackendOptions

Reply = str | BackendError  # a BackendError in the script is raised instead of answering


class ScriptedChatClient:
    """Answers each call with the next scripted reply and remembers the prompts it was sent."""

    provider = "scripted"

    def __init__(
        self, replies: Sequence[Reply], *, model: str = "scripted", cost_per_call_usd: float = 0.0
    ) -> None:
        self.model = model
        self.replies = list(replies)
        self.cost_per_call_usd = cost_per_call_usd
        self.prompts: list[RenderedPrompt] = []

    def complete(self, prompt: RenderedPrompt) -> Completion:
        """Return (or raise) the next scripted reply; `BackendError` once the script is used up."""
        self.prompts.append(prompt)
        if len(self.prompts) > len(self.replies):
            raise BackendError(f"scripted: no reply left (script has {len(self.replies)})")
        reply = self.replies[len(self.prompts) - 1]
        if isinstance(reply, BackendError):
            raise reply
        # Token counts are rough character-based figures: the fake has no tokenizer.
        prompt_chars = len(prompt.system) + len(prompt.memory) + len(prompt.user)
        usage = Usage(
            input_tokens=prompt_chars // 4, output_tokens=len(reply) // 4, cost_usd=self.cost_per_call_usd
        )
        return Completion(text=reply, model=self.model, usage=usage, stop_reason="end_turn")


class ScriptedGenerator(LLMGenerator):
    """`LLMGenerator` over a `ScriptedChatClient`. `client.prompts` holds what it was asked."""

    client: ScriptedChatClient

    def __init__(
        self,
        replies: Sequence[Reply],
        *,
        budget: BudgetTracker | None = None,
        retry: RetryPolicy | None = None,
        cost_per_call_usd: float = 0.0,
    ) -> None:
        client = ScriptedChatClient(replies, cost_per_call_usd=cost_per_call_usd)
        super().__init__(client, budget=budget, retry=retry or RetryPolicy(max_attempts=3, base_delay_s=0.0))


def scripted_factory(
    replies: Sequence[Reply], *, cost_per_call_usd: float = 0.0
) -> Callable[..., ScriptedGenerator]:
    """A registry factory building a `ScriptedGenerator` with the registry's budget and retry policy."""

    def build(options: BackendOptions) -> ScriptedGenerator:
        return ScriptedGenerator(
            replies, budget=options.budget, retry=options.retry, cost_per_call_usd=cost_per_call_usd
        )

    return build
