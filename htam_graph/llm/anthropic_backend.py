"""Anthropic Messages API backend (`--backend anthropic[:MODEL]`), through the official `anthropic` SDK.

The SDK is imported only when a call is made. The system prompt and the strategy's memory context are sent
as separate system content blocks, each marked `cache_control: ephemeral`, so repeated steps read them from
the prompt cache (a block shorter than the model's minimum cacheable length is simply not cached).
"""

from __future__ import annotations

from typing import Any

from htam_graph.errors import BackendError
from htam_graph.llm.generator import Completion
from htam_graph.llm.pricing import Price, make_usage
from htam_graph.llm.prompts import RenderedPrompt
from htam_graph.llm.retry import TransientBackendError, read_timeout, status_error

DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-6"
DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"
_CACHE = {"type": "ephemeral"}


class AnthropicChatClient:
    """One Anthropic model. `complete` makes exactly one HTTP request (SDK retries are off)."""

    provider = "anthropic"

    def __init__(
        self,
        *,
        model: str,
        api_key: str,
        base_url: str = DEFAULT_ANTHROPIC_BASE_URL,
        max_tokens: int = 16384,
        timeout_s: float = 600.0,
        temperature: float | None = None,
        price: Price | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.temperature = temperature
        self.price = price
        self._api_key = api_key
        self._sdk_client: Any = None

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

    def complete(self, prompt: RenderedPrompt) -> Completion:
        """Send `prompt`; map SDK errors to transient / permanent `BackendError`s."""
        anthropic = _import_sdk()
        try:
            message = self._client().messages.create(**self.request_params(prompt), timeout=self.timeout_s)
        except anthropic.APIStatusError as e:
            detail = e.api_message or e.message
            raise status_error(self.provider, e.status_code, detail, e.response.headers) from e
        except anthropic.APITimeoutError as e:  # the request was sent: re-sending it would bill it again
            raise read_timeout(self.provider, self.timeout_s) from e
        except anthropic.APIConnectionError as e:
            raise TransientBackendError(f"{self.provider}: connection failed: {e}") from e
        except anthropic.APIError as e:  # e.g. a response that does not validate
            raise BackendError(f"{self.provider}: bad response: {e}") from e
        return self._completion(message)

    def _client(self) -> Any:
        if self._sdk_client is None:
            anthropic = _import_sdk()
            self._sdk_client = anthropic.Anthropic(
                api_key=self._api_key, base_url=self.base_url, max_retries=0, timeout=self.timeout_s
            )
        return self._sdk_client

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


def _import_sdk() -> Any:
    try:
        import anthropic
    except ImportError as e:
        raise BackendError("the anthropic package is not installed: pip install 'htam-graph[llm]'") from e
    return anthropic
