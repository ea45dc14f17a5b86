"""What the official-SDK chat backends (Anthropic, OpenAI-compatible) share: settings, client, error map.

Both SDKs raise the same four error classes (`APIStatusError`, `APITimeoutError`, `APIConnectionError`,
`APIError`) and build their client from the same keywords, so one `complete` maps both to transient /
permanent `BackendError`s. A subclass names its SDK package and client class and says how to build the
request, send it and read the response.
"""

from __future__ import annotations

import importlib
from typing import Any

from htam_graph.errors import BackendError
from htam_graph.llm.generator import Completion
from htam_graph.llm.pricing import Price
from htam_graph.llm.prompts import RenderedPrompt
from htam_graph.llm.retry import TransientBackendError, read_timeout, status_error


class SdkChatClient:
    """One model behind an official SDK. `complete` makes exactly one HTTP request (SDK retries are off)."""

    provider: str
    sdk_package: str  # the SDK's import name
    sdk_client_class: str  # its client class

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
        """The keyword arguments of the SDK's create call for `prompt`."""
        raise NotImplementedError

    def complete(self, prompt: RenderedPrompt) -> Completion:
        """Send `prompt`; map SDK errors to transient / permanent `BackendError`s."""
        sdk = self._sdk()
        try:
            response = self._create(prompt)
        except sdk.APIStatusError as e:
            detail = self._status_detail(e)
            raise status_error(self.provider, e.status_code, detail, e.response.headers) from e
        except sdk.APITimeoutError as e:  # the request was sent: re-sending it would bill it again
            raise read_timeout(self.provider, self.timeout_s) from e
        except sdk.APIConnectionError as e:
            raise TransientBackendError(f"{self.provider}: connection failed: {e}") from e
        except sdk.APIError as e:  # e.g. a response that does not validate
            raise BackendError(f"{self.provider}: bad response: {e}") from e
        return self._completion(response)

    def _client(self) -> Any:
        """The SDK client, built on first use (with the SDK's own retries off)."""
        if self._sdk_client is None:
            self._sdk_client = getattr(self._sdk(), self.sdk_client_class)(
                api_key=self._api_key, base_url=self.base_url, max_retries=0, timeout=self.timeout_s
            )
        return self._sdk_client

    def _status_detail(self, error: Any) -> str:
        """The message of an `APIStatusError`, as the SDK gives it."""
        return str(error.message)

    def _sdk(self) -> Any:
        """The SDK module `sdk_package`, imported when a call is made (it is an optional dependency)."""
        try:
            return importlib.import_module(self.sdk_package)
        except ImportError as e:
            raise BackendError(
                f"the {self.sdk_package} package is not installed: pip install 'htam-graph[llm]'"
            ) from e

    def _create(self, prompt: RenderedPrompt) -> Any:
        """One create call with `request_params(prompt)`; returns the SDK's response."""
        raise NotImplementedError

    def _completion(self, response: Any) -> Completion:
        """The `Completion` of an SDK response."""
        raise NotImplementedError
