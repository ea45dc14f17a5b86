"""OpenAI-compatible chat completions backend (`--backend openai:MODEL`): DeepSeek, vLLM, OpenRouter, OpenAI.

Uses the official `openai` SDK, imported only when a call is made. Reasoning is kept out of the code: the
`reasoning_content` (DeepSeek, vLLM) or `reasoning` field is never parsed, and `<think>` spans inside the
content are stripped by the extractor. Prompt caching on these servers is automatic for a repeated prefix,
so the stable system prompt and memory context come first.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from htam_graph.errors import BackendError
from htam_graph.llm.generator import Completion
from htam_graph.llm.pricing import make_usage
from htam_graph.llm.prompts import RenderedPrompt
from htam_graph.llm.sdk_chat import SdkChatClient
from htam_graph.model import Usage

OPENAI_BASE_URL = "https://api.openai.com/v1"
DEEPSEEK_BASE_URL = "https://api.deepseek.com"


def default_base_url(model: str) -> str:
    """DeepSeek's endpoint for deepseek-* models, OpenAI's otherwise."""
    return DEEPSEEK_BASE_URL if model.lower().startswith("deepseek") else OPENAI_BASE_URL


class OpenAIChatClient(SdkChatClient):
    """One model on an OpenAI-compatible server. `complete` makes exactly one HTTP request."""

    provider = "openai"
    sdk_package = "openai"
    sdk_client_class = "OpenAI"

    def request_params(self, prompt: RenderedPrompt) -> dict[str, Any]:
        """The keyword arguments of `chat.completions.create` for `prompt`."""
        system = prompt.system + ("\n\n" + prompt.memory if prompt.memory else "")
        # OpenAI's own API wants max_completion_tokens for reasoning models; compatible servers take
        # max_tokens.
        limit_key = (
            "max_completion_tokens" if urlparse(self.base_url).hostname == "api.openai.com" else "max_tokens"
        )
        params: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": prompt.user},
            ],
            limit_key: self.max_tokens,
        }
        if self.temperature is not None:
            params["temperature"] = self.temperature
        return params

    def _create(self, prompt: RenderedPrompt) -> Any:
        return self._client().chat.completions.create(**self.request_params(prompt), timeout=self.timeout_s)

    def _completion(self, response: Any) -> Completion:
        if not response.choices:
            raise BackendError(f"{self.provider}: the server returned no choices for model {self.model}")
        choice = response.choices[0]
        message = choice.message
        reasoning = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None) or ""
        return Completion(
            text=message.content or "",
            model=response.model or self.model,
            usage=self._usage(response.usage),
            stop_reason=choice.finish_reason or "",
            reasoning_chars=len(reasoning) if isinstance(reasoning, str) else 0,
        )

    def _usage(self, usage: Any) -> Usage:
        if usage is None:
            return make_usage(self.price, self.model, input_tokens=0, output_tokens=0)
        prompt_tokens = usage.prompt_tokens or 0
        details = getattr(usage, "prompt_tokens_details", None)
        cached = (getattr(details, "cached_tokens", None) if details else None) or 0
        cached = cached or (getattr(usage, "prompt_cache_hit_tokens", None) or 0)  # DeepSeek's field
        cached = min(cached, prompt_tokens)
        return make_usage(
            self.price,
            self.model,
            input_tokens=prompt_tokens - cached,
            output_tokens=usage.completion_tokens or 0,
            cache_read_tokens=cached,
        )
