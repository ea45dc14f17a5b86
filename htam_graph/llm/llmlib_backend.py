"""simonw's `llm` library as the model (`--backend llm:MODEL`): every model its plugins register.

`MODEL` is any model id or alias `llm models` lists (OpenAI's built in; Ollama, Gemini, Mistral, OpenRouter,
Anthropic and local models through plugins such as `llm install llm-ollama`). Keys are `llm`'s own: `llm keys
set NAME` or the model's environment variable. The library is imported only when this backend is built.

The system prompt and the strategy memory go as `llm`'s system prompt, the step message as its prompt;
`--max-tokens` and `--temperature` are passed when the model's options have them. Plugins do not share a
timeout option, so the call runs in a helper thread that is abandoned past `--llm-timeout` (the step fails as
`infra_error`; the plugin's own request may still finish in the background). An exception from a plugin fails
that step only (its types differ per plugin, so none is retried); a missing key fails the run.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from htam_graph.errors import BackendError, StepInfraError
from htam_graph.llm.generator import Completion
from htam_graph.llm.pricing import Price, make_usage
from htam_graph.llm.prompts import RenderedPrompt
from htam_graph.llm.retry import read_timeout

log = logging.getLogger(__name__)


class LlmLibraryClient:
    """One model of the `llm` library. `model` is its model id (an alias resolves to it)."""

    provider = "llm"

    def __init__(
        self,
        name: str,
        *,
        timeout_s: float = 600.0,
        max_tokens: int = 16384,
        temperature: float | None = None,
        price: Price | None = None,
    ) -> None:
        llm = _import_llm()
        try:
            self._model: Any = llm.get_model(name)
        except llm.UnknownModelError as e:
            raise BackendError(
                f"unknown llm model {name!r}: `llm models` lists the installed ones "
                "(plugins add more, e.g. `llm install llm-ollama`)"
            ) from e
        self.model = str(self._model.model_id)
        self._key: str | None = None
        if getattr(self._model, "needs_key", None):
            try:
                self._key = self._model.get_key()
            except llm.NeedsKeyException as e:
                raise BackendError(f"llm model {self.model}: {e}") from e
        self.timeout_s = timeout_s
        self.price = price
        self.options = self._options(max_tokens, temperature)

    def _options(self, max_tokens: int, temperature: float | None) -> dict[str, Any]:
        fields = getattr(self._model.Options, "model_fields", {})
        options: dict[str, Any] = {}
        if "max_tokens" in fields:
            options["max_tokens"] = max_tokens
        if temperature is not None:
            if "temperature" in fields:
                options["temperature"] = temperature
            else:
                log.warning("llm model %s has no temperature option: --temperature is ignored", self.model)
        return options

    def complete(self, prompt: RenderedPrompt) -> Completion:
        """One call of the model; `StepInfraError` past the timeout or when the plugin raises."""
        system = prompt.system + ("\n\n" + prompt.memory if prompt.memory else "")
        box: dict[str, Any] = {}

        def call() -> None:
            try:
                response = self._model.prompt(
                    prompt.user, system=system, stream=False, key=self._key, **self.options
                )
                box["text"] = response.text()
                box["response"] = response
            except Exception as e:  # any plugin's error: reported below, in the caller's thread
                box["error"] = e

        worker = threading.Thread(target=call, name=f"llm:{self.model}", daemon=True)
        worker.start()
        worker.join(self.timeout_s)
        if worker.is_alive():
            raise read_timeout(f"llm:{self.model}", self.timeout_s)
        error = box.get("error")
        if error is not None:
            if isinstance(error, _import_llm().NeedsKeyException):
                raise BackendError(f"llm model {self.model}: {error}") from error
            raise StepInfraError(f"llm:{self.model}: {type(error).__name__}: {error}") from error
        return self._completion(box["text"], box["response"])

    def _completion(self, text: str, response: Any) -> Completion:
        usage = response.usage()
        raw = response.response_json if isinstance(response.response_json, dict) else {}
        stop = raw.get("finish_reason") or raw.get("stop_reason") or ""
        return Completion(
            text=text,
            model=str(getattr(response, "resolved_model", None) or self.model),
            usage=make_usage(
                self.price, self.model, input_tokens=usage.input or 0, output_tokens=usage.output or 0
            ),
            stop_reason=str(stop),
        )


def _import_llm() -> Any:
    try:
        import llm
    except ImportError as e:
        raise BackendError("the llm package is not installed: pip install 'htam-graph[llm]'") from e
    return llm
