"""A local HTTP server speaking just enough of the Anthropic Messages and OpenAI chat completions APIs.

It listens on 127.0.0.1 on a free port, answers scripted responses in order per path, and records every
request (path, headers, JSON body) so tests can assert what the backends sent. With no scripted response
left it answers HTTP 400 (not retried), so a test can never loop.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MESSAGES = "/v1/messages"
CHAT = "/v1/chat/completions"


@dataclass
class Scripted:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class FakeLLMServer:
    """Start with `with FakeLLMServer() as server:`; `server.url` is `http://127.0.0.1:PORT`."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self._script: dict[str, deque[Scripted]] = {MESSAGES: deque(), CHAT: deque()}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def enqueue(self, path: str, response: Scripted) -> None:
        with self._lock:
            self._script[path].append(response)

    def received(self, path: str) -> list[Received]:
        return [r for r in self.requests if r.path == path]

    def _next(self, path: str, received: Received) -> Scripted:
        with self._lock:
            self.requests.append(received)
            queue = self._script.get(path)
            if not queue:
                return Scripted(
                    400, error_body("invalid_request_error", f"fake server: nothing scripted for {path}")
                )
            return queue.popleft()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(length)
                body = json.loads(raw) if raw else {}
                received = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                scripted = server._next(self.path, received)
                if scripted.delay_s:
                    time.sleep(scripted.delay_s)
                payload = json.dumps(scripted.body).encode()
                try:
                    self.send_response(scripted.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for name, value in scripted.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                return

        return Handler


def error_body(kind: str, message: str) -> dict[str, Any]:
    """Anthropic's error shape (OpenAI's is close enough for the SDK: {"error": {...}})."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def anthropic_message(
    text: str,
    *,
    model: str = "claude-sonnet-4-6",
    input_tokens: int = 100,
    output_tokens: int = 50,
    cache_write: int = 0,
    cache_read: int = 0,
    thinking: str | None = None,
    stop_reason: str = "end_turn",
) -> Scripted:
    content: list[dict[str, Any]] = []
    if thinking is not None:
        content.append({"type": "thinking", "thinking": thinking, "signature": "sig"})
    content.append({"type": "text", "text": text})
    body = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": cache_write,
            "cache_read_input_tokens": cache_read,
        },
    }
    return Scripted(200, body)


def openai_completion(
    content: str | None,
    *,
    model: str = "deepseek-reasoner",
    reasoning_content: str | None = None,
    prompt_tokens: int = 100,
    completion_tokens: int = 50,
    cached_tokens: int = 0,
    finish_reason: str = "stop",
) -> Scripted:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning_content is not None:
        message["reasoning_content"] = reasoning_content
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
            "prompt_cache_hit_tokens": cached_tokens,
            "prompt_cache_miss_tokens": prompt_tokens - cached_tokens,
        },
    }
    return Scripted(200, body)
