"""Anthropic Messages API backend (`--backend anthropic[:MODEL]`), through the official `anthropic` SDK.

The SDK is imported only when a call is made. The system prompt and the strategy's memory context are sent
as separate system content blocks, each marked `cache_control: ephemeral`, so repeated steps read them from
the prompt cache (a block shorter than the model's minimum cacheable length is simply not cached).
"""

from __future__ import annotations

from typing import Any

from htam_graph.llm.generator import Completion
from htam_graph.llm.pricing import make_usage
from htam_graph.llm.prompts import RenderedPrompt
from htam_graph.llm.sdk_chat import SdkChatClient

DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-6"
DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"
_CACHE = {"type": "ephemeral"}


class AnthropicChatClient(SdkChatClient):
    """One Anthropic model. `complete` makes exactly one HTTP request (SDK retries are off)."""

    provider = "anthropic"
    sdk_package = "anthropic"
    sdk_client_class = "Anthropic"

    def request_params(self, prompt: RenderedPrompt) -> dict[str, Any]:
        """The keyword arguments of `messages.create` for `prompt`."""
        system = [{"type": "text", "text": prompt.system, "cache_control": _CACHE}]
        if prompt.memory:
            system.append({"type": "text", "text": prompt.memory, "cache_control": _CACHE})
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": system,
            "messages": [{"role": "user", "content": prompt.user}],
        }
        if self.temperature is not None:
            params["temperature"] = self.temperature
        return params

    def _create(self, prompt: RenderedPrompt) -> Any:
        return self._client().messages.create(**self.request_params(prompt), timeout=self.timeout_s)

    def _status_detail(self, error: Any) -> str:
        return str(error.api_message or error.message)

    def _completion(self, message: Any) -> Completion:
        text = "".join(block.text for block in message.content if getattr(block, "type", "") == "text")
        reasoning = sum(
            len(getattr(block, "thinking", "") or "")
            for block in message.content
            if getattr(block, "type", "") == "thinking"
        )
        usage = message.usage
        return Completion(
            text=text,
            model=message.model or self.model,
            usage=make_usage(
                self.price,
                self.model,
                input_tokens=usage.input_tokens or 0,
                output_tokens=usage.output_tokens or 0,
                cache_read_tokens=usage.cache_read_input_tokens or 0,
                cache_write_tokens=usage.cache_creation_input_tokens or 0,
            ),
            stop_reason=message.stop_reason or "",
            reasoning_chars=reasoning,
        )
