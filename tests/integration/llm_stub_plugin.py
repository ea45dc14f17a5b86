"""An `llm` plugin for tests: registers stub models through llm's real plugin hook (`register_models`).

Load it with `llm.plugins.pm.register(module, name=...)`, as `llm` itself registers installed plugins; then
`llm.get_model("stub-model")` (or its alias `stub`) finds it. `stub-model` answers every prompt with the next
of `REPLIES` (the last one repeats), records the prompts it was given, and reports token usage;
`stub-keyed` needs a key (`llm keys set stub-key` or `HTAM_STUB_KEY`) and answers the same way; `stub-slow`
answers after `SLOW_S` seconds; `stub-broken` raises, as a plugin whose service failed does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import llm

REPLIES: list[str] = ["no code"]
SEEN: list[dict[str, Any]] = []
FINISH: list[str] = ["stop"]
SLOW_S = 5.0


def _answer(prompt: llm.Prompt, response: llm.Response, options: Any) -> Iterator[str]:
    SEEN.append({"prompt": prompt.prompt, "system": prompt.system, "options": options.model_dump()})
    text = REPLIES[min(len(SEEN) - 1, len(REPLIES) - 1)]
    response.set_usage(input=len(prompt.prompt) // 4, output=len(text) // 4)
    response.response_json = {"finish_reason": FINISH[0]}
    yield text


class StubModel(llm.Model):
    model_id = "stub-model"

    class Options(llm.Options):
        max_tokens: int | None = None
        temperature: float | None = None

    def execute(
        self, prompt: llm.Prompt, stream: bool, response: llm.Response, conversation: Any
    ) -> Iterator[str]:
        yield from _answer(prompt, response, prompt.options)


class KeyedStubModel(llm.KeyModel):
    model_id = "stub-keyed"
    needs_key = "stub-key"
    key_env_var = "HTAM_STUB_KEY"

    def execute(
        self, prompt: llm.Prompt, stream: bool, response: llm.Response, conversation: Any, key: str | None
    ) -> Iterator[str]:
        yield from _answer(prompt, response, prompt.options)


class SlowStubModel(StubModel):
    model_id = "stub-slow"

    def execute(
        self, prompt: llm.Prompt, stream: bool, response: llm.Response, conversation: Any
    ) -> Iterator[str]:
        time.sleep(SLOW_S)
        yield from _answer(prompt, response, prompt.options)


class BrokenStubModel(StubModel):
    model_id = "stub-broken"

    def execute(
        self, prompt: llm.Prompt, stream: bool, response: llm.Response, conversation: Any
    ) -> Iterator[str]:
        raise ConnectionError("the stub service is down")
        yield ""


@llm.hookimpl
def register_models(register: Any) -> None:
    register(StubModel(), aliases=("stub",))
    register(KeyedStubModel())
    register(SlowStubModel())
    register(BrokenStubModel())
