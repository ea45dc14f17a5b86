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
from htam_graph.llm.pricing import Price, make_usage
from htam_graph.llm.prompts import RenderedPrompt
from htam_graph.llm.retry import TransientBackendError, read_timeout, status_error
from htam_graph.model import Usage

OPENAI_BASE_URL = "https://api.openai.com/v1"
DEEPSEEK_BASE_URL = "https://api.deepseek.com"


def default_base_url(model: str) -> str:
    """DeepSeek's endpoint for deepseek-* models, OpenAI's otherwise."""
    return DEEPSEEK_BASE_URL if model.lower().startswith("deepseek") else OPENAI_BASE_URL


class OpenAIChatClient:
    """One model on an OpenAI-compatible server. `complete` makes exactly one HTTP request."""

    provider = "openai"

    def __init__(
        self,
        *,
        model: str,
        api_key: str,
        base_url: str,
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

    def complete(self, prompt: RenderedPrompt) -> Completion:
        """Send `prompt`; map SDK errors to transient / permanent `BackendError`s."""
        openai = _import_sdk()
        try:
            response = self._client().chat.completions.create(
                **self.request_params(prompt), timeout=self.timeout_s
            )
        except openai.APIStatusError as e:
            raise status_error(self.provider, e.status_code, e.message, e.response.headers) from e
        except openai.APITimeoutError as e:  # the request was sent: re-sending it would bill it again
            raise read_timeout(self.provider, self.timeout_s) from e
        except openai.APIConnectionError as e:
            raise TransientBackendError(f"{self.provider}: connection failed: {e}") from e
        except openai.APIError as e:
            raise BackendError(f"{self.provider}: bad response: {e}") from e
        return self._completion(response)

    def _client(self) -> Any:
        if self._sdk_client is None:
            openai = _import_sdk()
            self._sdk_client = openai.OpenAI(
                api_key=self._api_key, base_url=self.base_url, max_retries=0, timeout=self.timeout_s
            )
        return self._sdk_client

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


def _import_sdk() -> Any:
    try:
        import openai
    except ImportError as e:
        raise BackendError("the openai package is not installed: pip install 'htam-graph[llm]'") from e
    return openai
