"""Every awaited request as one batch job (`--backend batch:anthropic[:MODEL]`, `batch:openai:MODEL`).

With a batch backend each run stops awaiting its reply like `--backend files` (see `deferred.py`). The courier
then gathers every request still awaiting a reply under the output folder, sends them as ONE job (Anthropic
Message Batches: `POST /v1/messages/batches`, results as JSON Lines from the batch's `results_url`; OpenAI
Batch API: the requests uploaded as a JSON Lines file with `purpose=batch`, `POST /v1/batches`, the output
file's content), polls it for up to `wait_s` seconds, and saves each result as the step's reply (with its
model, usage and stop reason), or as an error for a request that failed, so the runs resume. The job's id is
kept in a state file until its results are saved: a command stopped (or out of time) while the job runs
collects that job next time instead of sending the requests again.

Each request is the one the online backend sends (same system blocks and cache marks, same parameters).
Batched tokens cost half the online price (both providers' batch discount; an unknown price stays unknown).
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from htam_graph.errors import BackendError
from htam_graph.llm.anthropic_backend import (
    DEFAULT_ANTHROPIC_BASE_URL,
    DEFAULT_ANTHROPIC_MODEL,
    AnthropicChatClient,
)
from htam_graph.llm.generator import Completion
from htam_graph.llm.openai_backend import OpenAIChatClient, default_base_url
from htam_graph.llm.pending import awaiting_requests, read_pending, write_reply, write_reply_error
from htam_graph.llm.pricing import Price, lookup_price
from htam_graph.llm.prompts import RenderedPrompt

log = logging.getLogger(__name__)

BATCH_DISCOUNT = 0.5
_POLL_MAX_S = 60.0


@dataclass(frozen=True)
class BatchResult:
    """One request's outcome in a finished job: a completion, or why there is none."""

    completion: Completion | None
    error: str | None = None


class BatchClient(Protocol):
    """One provider's batch API."""

    provider: str
    model: str

    def submit(self, prompts: Mapping[str, RenderedPrompt]) -> str:
        """Send the prompts (keyed by custom id) as one job; return its id."""
        ...

    def ended(self, batch_id: str) -> bool:
        """Whether the job has ended (its results can be read)."""
        ...

    def results(self, batch_id: str) -> dict[str, BatchResult]:
        """The ended job's result of each request, by custom id."""
        ...


def batch_price(model: str, price: Price | None) -> Price | None:
    """The batch price of `model`: half the online one (None when unknown)."""
    online = price or lookup_price(model)
    if online is None:
        return None
    return Price(*(value * BATCH_DISCOUNT for value in vars(online).values()))


class AnthropicBatchClient:
    """Anthropic Message Batches over the official SDK (through `AnthropicChatClient`'s request shape)."""

    provider = "anthropic"

    def __init__(self, chat: AnthropicChatClient) -> None:
        self.chat = chat
        self.model = chat.model

    def submit(self, prompts: Mapping[str, RenderedPrompt]) -> str:
        requests = [{"custom_id": cid, "params": self.chat.request_params(p)} for cid, p in prompts.items()]
        batch = _call(self.provider, lambda: self.chat._client().messages.batches.create(requests=requests))
        return str(batch.id)

    def ended(self, batch_id: str) -> bool:
        batch = _call(self.provider, lambda: self.chat._client().messages.batches.retrieve(batch_id))
        return bool(batch.processing_status == "ended")

    def results(self, batch_id: str) -> dict[str, BatchResult]:
        items = _call(self.provider, lambda: list(self.chat._client().messages.batches.results(batch_id)))
        out: dict[str, BatchResult] = {}
        for item in items:
            result = item.result
            if result.type == "succeeded":
                out[item.custom_id] = BatchResult(self.chat._completion(result.message))
            else:
                detail = getattr(getattr(getattr(result, "error", None), "error", None), "message", None)
                out[item.custom_id] = BatchResult(None, f"{result.type}" + (f": {detail}" if detail else ""))
        return out


class OpenAIBatchClient:
    """The OpenAI Batch API over the official SDK (chat completions, `OpenAIChatClient`'s request shape)."""

    provider = "openai"
    endpoint = "/v1/chat/completions"

    def __init__(self, chat: OpenAIChatClient) -> None:
        self.chat = chat
        self.model = chat.model

    def submit(self, prompts: Mapping[str, RenderedPrompt]) -> str:
        lines = [
            json.dumps(
                {
                    "custom_id": cid,
                    "method": "POST",
                    "url": self.endpoint,
                    "body": self.chat.request_params(p),
                }
            )
            for cid, p in prompts.items()
        ]
        data = ("\n".join(lines) + "\n").encode("utf-8")
        client = self.chat._client()
        upload = _call(
            self.provider, lambda: client.files.create(file=("htam-batch.jsonl", data), purpose="batch")
        )
        batch = _call(
            self.provider,
            lambda: client.batches.create(
                input_file_id=upload.id, endpoint=self.endpoint, completion_window="24h"
            ),
        )
        return str(batch.id)

    def ended(self, batch_id: str) -> bool:
        batch = _call(self.provider, lambda: self.chat._client().batches.retrieve(batch_id))
        return batch.status in ("completed", "failed", "expired", "cancelled")

    def results(self, batch_id: str) -> dict[str, BatchResult]:
        from openai.types.chat import ChatCompletion

        client = self.chat._client()
        batch = _call(self.provider, lambda: client.batches.retrieve(batch_id))
        out: dict[str, BatchResult] = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if not file_id:
                continue
            text = str(_call(self.provider, functools.partial(_file_text, client, file_id)))
            for line in text.splitlines():
                if not line.strip():
                    continue
                row = json.loads(line)
                response, error = row.get("response") or {}, row.get("error")
                if response.get("status_code") == 200 and not error:
                    body = ChatCompletion.model_validate(response["body"])
                    out[row["custom_id"]] = BatchResult(self.chat._completion(body))
                else:
                    detail = (error or {}).get("message") or (response.get("body") or {}).get(
                        "error", {}
                    ).get("message")
                    out[row["custom_id"]] = BatchResult(None, f"HTTP {response.get('status_code')}: {detail}")
        if not out and batch.status != "completed":
            raise BackendError(f"openai batch {batch_id} ended {batch.status}: {batch.errors}")
        return out


def _file_text(client: Any, file_id: str) -> str:
    return str(client.files.content(file_id).text)


def _call(provider: str, fn: Callable[[], Any]) -> Any:
    """One SDK call; its failures become one-line `BackendError`s."""
    try:
        return fn()
    except BackendError:
        raise
    except Exception as e:  # the SDKs' errors (status, connection, validation) differ per provider
        raise BackendError(f"{provider} batch API: {type(e).__name__}: {e}") from e


class BatchCourier:
    """Sends the awaited requests under a folder as one job, waits for it, and saves the replies."""

    def __init__(
        self, client: BatchClient, *, wait_s: float, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.client = client
        self.wait_s = wait_s
        self.sleep = sleep

    def deliver(self, root: Path, state_path: Path, say: Callable[[str], None]) -> bool:
        """Save a reply (or an error) for every request of the job; True when some were saved (the runs can
        resume), False when there is nothing to send or the job is still running after `wait_s` seconds."""
        state = self._read_state(state_path)
        if state is None:
            state = self._submit(root, state_path, say)
            if state is None:
                return False
        batch_id = state["batch_id"]
        deadline, pause = time.monotonic() + self.wait_s, 1.0
        while not self.client.ended(batch_id):
            if time.monotonic() >= deadline:
                say(f"batch {batch_id} still running after {self.wait_s:g} s (--llm-timeout): "
                    "run the same command again to collect it")  # fmt: skip
                return False
            self.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, _POLL_MAX_S)
        results = self.client.results(batch_id)
        saved = failed = 0
        for cid, where in state["requests"].items():
            path = Path(where)
            step = int(path.name.split(".")[0].removeprefix("step_"))
            result = results.get(cid)
            if result is None or result.completion is None:
                why = result.error if result is not None else "no result for this request"
                write_reply_error(path.parent, step, f"{self.client.provider} batch {batch_id}: {why}")
                failed += 1
                continue
            c = result.completion
            meta = {
                "model": c.model,
                "usage": c.usage.model_dump(),
                "finish_reason": c.stop_reason,
                "batch": batch_id,
            }
            write_reply(path.parent, step, c.text, meta)
            saved += 1
        state_path.unlink(missing_ok=True)
        say(f"batch {batch_id}: {saved} repl{'y' if saved == 1 else 'ies'} saved, {failed} failed")
        return True

    def _submit(self, root: Path, state_path: Path, say: Callable[[str], None]) -> dict[str, Any] | None:
        paths = awaiting_requests(root)
        if not paths:
            return None
        prompts: dict[str, RenderedPrompt] = {}
        requests: dict[str, str] = {}
        for n, path in enumerate(paths, start=1):
            step = int(path.name.split(".")[0].removeprefix("step_"))
            pending = read_pending(path.parent, step)
            if pending is None:
                continue
            cid = f"htam-{n:05d}"  # Anthropic's custom ids: [a-zA-Z0-9_-]{1,64}
            p = pending.pending.prompt
            prompts[cid] = RenderedPrompt(p.get("system", ""), p.get("memory", ""), p.get("user", ""))
            requests[cid] = str(path)
        batch_id = self.client.submit(prompts)
        state = {"provider": self.client.provider, "model": self.client.model, "batch_id": batch_id,
                 "requests": requests}  # fmt: skip
        state_path.parent.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
        say(
            f"batch {batch_id}: {len(prompts)} request(s) sent to "
            f"{self.client.provider} ({self.client.model})"
        )
        return state

    def _read_state(self, state_path: Path) -> dict[str, Any] | None:
        if not state_path.is_file():
            return None
        try:
            state: dict[str, Any] = json.loads(state_path.read_text(encoding="utf-8"))
            state["batch_id"], state["requests"]  # noqa: B018 (both must be there)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise BackendError(
                f"{state_path} does not read back ({e}); remove it to send the requests again"
            ) from e
        if state.get("provider") != self.client.provider:
            raise BackendError(
                f"{state_path} holds a {state.get('provider')} batch, not {self.client.provider}: "
                "collect it with that backend or remove the file"
            )
        return state


def make_courier(
    spec: str,
    *,
    env: Mapping[str, str],
    base_url: str | None = None,
    max_tokens: int = 16384,
    temperature: float | None = None,
    wait_s: float = 600.0,
    price: Price | None = None,
) -> BatchCourier:
    """The courier of `batch:anthropic[:MODEL]` or `batch:openai:MODEL` (keys from `env`)."""
    _, _, rest = spec.partition(":")
    provider, _, model = rest.partition(":")
    client: BatchClient
    if provider == "anthropic":
        model = model or DEFAULT_ANTHROPIC_MODEL
        chat = AnthropicChatClient(
            model=model,
            api_key=_key(env, "ANTHROPIC_API_KEY"),
            base_url=base_url or env.get("ANTHROPIC_BASE_URL") or DEFAULT_ANTHROPIC_BASE_URL,
            max_tokens=max_tokens,
            temperature=temperature,
            price=batch_price(model, price),
        )
        client = AnthropicBatchClient(chat)
    elif provider == "openai" and model:
        openai_chat = OpenAIChatClient(
            model=model,
            api_key=_key(env, "OPENAI_API_KEY"),
            base_url=base_url or env.get("OPENAI_BASE_URL") or default_base_url(model),
            max_tokens=max_tokens,
            temperature=temperature,
            price=batch_price(model, price),
        )
        client = OpenAIBatchClient(openai_chat)
    else:
        raise BackendError("the batch backend is batch:anthropic[:MODEL] or batch:openai:MODEL")
    return BatchCourier(client, wait_s=wait_s)


def _key(env: Mapping[str, str], var: str) -> str:
    key = env.get(var, "").strip()
    if not key:
        raise BackendError(f"{var} is not set: export it or use --backend files")
    return key
