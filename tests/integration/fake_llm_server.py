"""A local HTTP server speaking just enough of the Anthropic Messages and OpenAI chat completions APIs, and of
both batch APIs.

It listens on 127.0.0.1 on a free port, answers scripted responses in order per path, and records every
request (path, headers, JSON body) so tests can assert what the backends sent. With no scripted response
left it answers HTTP 400 (not retried), so a test can never loop.

Batches are stateful, with the documented shapes: Anthropic Message Batches (`POST /v1/messages/batches`,
`GET /v1/messages/batches/{id}` reporting `in_progress` for `polls_before_end` polls, then `ended` with a
`results_url` serving JSON Lines of `{custom_id, result: {type: succeeded, message} | {type: errored, error}}`),
and the OpenAI Batch API (multipart `POST /v1/files` with `purpose=batch`, `POST /v1/batches`,
`GET /v1/batches/{id}` reaching `completed` with `output_file_id` / `error_file_id`, `GET /v1/files/{id}/content`
serving lines of `{id, custom_id, response: {status_code, request_id, body}, error}`). Each request's answer is
`batch_answer(custom_id, params)`: the reply text, or None for a request the provider refuses.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MESSAGES = "/v1/messages"
CHAT = "/v1/chat/completions"
ANTHROPIC_BATCHES = "/v1/messages/batches"
OPENAI_FILES = "/v1/files"
OPENAI_BATCHES = "/v1/batches"


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
        self.batches: dict[
            str, dict[str, Any]
        ] = {}  # id -> {"kind", "requests": [(custom_id, params)], "polls"}
        self.files: dict[str, bytes] = {}
        self.polls_before_end = 1
        self.batch_answer: Callable[[str, dict[str, Any]], str | None] = lambda cid, params: f"answer {cid}"
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

    # ------------------------------------------------------------------------------------------ batches
    def _batch_post(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, bytes] | None:
        """A batch API POST (None: not one of them)."""
        path = path.split("?")[0]
        if path == ANTHROPIC_BATCHES:
            body = json.loads(raw)
            with self._lock:
                self.requests.append(Received(path, headers, body))
                bid = f"msgbatch_{len(self.batches) + 1:04d}"
                reqs = [(r["custom_id"], r["params"]) for r in body["requests"]]
                self.batches[bid] = {"kind": "anthropic", "requests": reqs, "polls": 0}
            return 200, json.dumps(self._anthropic_batch(bid)).encode()
        if path == OPENAI_FILES:
            fields = _multipart(headers.get("content-type", ""), raw)
            with self._lock:
                self.requests.append(
                    Received(path, headers, {"purpose": fields.get("purpose", b"").decode()})
                )
                fid = f"file-{len(self.files) + 1:04d}"
                self.files[fid] = fields["file"]
            return 200, json.dumps(
                {"id": fid, "object": "file", "bytes": len(fields["file"]), "created_at": 0,
                 "filename": "batch.jsonl", "purpose": fields.get("purpose", b"").decode(), "status": "processed"}
            ).encode()  # fmt: skip
        if path == OPENAI_BATCHES:
            body = json.loads(raw)
            with self._lock:
                self.requests.append(Received(path, headers, body))
                lines = [
                    json.loads(x)
                    for x in self.files[body["input_file_id"]].decode().splitlines()
                    if x.strip()
                ]
                bid = f"batch_{len(self.batches) + 1:04d}"
                reqs = [(x["custom_id"], x["body"]) for x in lines]
                self.batches[bid] = {
                    "kind": "openai",
                    "requests": reqs,
                    "polls": 0,
                    "input": body,
                    "lines": lines,
                }
            return 200, json.dumps(self._openai_batch(bid)).encode()
        return None

    def _batch_get(self, path: str) -> tuple[int, bytes]:
        parts = path.split("?")[0].strip("/").split("/")
        with self._lock:
            if parts[:3] == ["v1", "messages", "batches"] and len(parts) == 4:
                self.batches[parts[3]]["polls"] += 1
                return 200, json.dumps(self._anthropic_batch(parts[3])).encode()
            if parts[:3] == ["v1", "messages", "batches"] and parts[4:] == ["results"]:
                return 200, self._anthropic_results(parts[3])
            if parts[:2] == ["v1", "batches"] and len(parts) == 3:
                self.batches[parts[2]]["polls"] += 1
                return 200, json.dumps(self._openai_batch(parts[2])).encode()
            if parts[:2] == ["v1", "files"] and parts[3:] == ["content"]:
                return 200, self.files[parts[2]]
        return 404, json.dumps(error_body("not_found_error", f"fake server: no {path}")).encode()

    def _ended(self, bid: str) -> bool:
        return bool(self.batches[bid]["polls"] > self.polls_before_end)

    def _anthropic_batch(self, bid: str) -> dict[str, Any]:
        n = len(self.batches[bid]["requests"])
        ended = self._ended(bid)
        return {
            "id": bid, "type": "message_batch", "processing_status": "ended" if ended else "in_progress",
            "request_counts": {"processing": 0 if ended else n, "succeeded": n if ended else 0, "errored": 0,
                               "canceled": 0, "expired": 0},
            "ended_at": "2026-01-01T00:10:00Z" if ended else None, "created_at": "2026-01-01T00:00:00Z",
            "expires_at": "2026-01-02T00:00:00Z", "archived_at": None, "cancel_initiated_at": None,
            "results_url": f"{self.url}/v1/messages/batches/{bid}/results" if ended else None,
        }  # fmt: skip

    def _anthropic_results(self, bid: str) -> bytes:
        lines = []
        for cid, params in self.batches[bid]["requests"]:
            text = self.batch_answer(cid, params)
            if text is None:
                result: dict[str, Any] = {
                    "type": "errored",
                    "error": error_body("invalid_request_error", "fake: refused"),
                }
            else:
                result = {"type": "succeeded", "message": anthropic_message(text, model=params["model"]).body}
            lines.append(json.dumps({"custom_id": cid, "result": result}))
        return ("\n".join(lines) + "\n").encode()

    def _openai_batch(self, bid: str) -> dict[str, Any]:
        batch = self.batches[bid]
        ended = self._ended(bid)
        if ended and "output_file_id" not in batch:
            out, err = [], []
            for n, (cid, body) in enumerate(batch["requests"]):
                text = self.batch_answer(cid, body)
                if text is None:
                    fail = {"error": {"message": "fake: refused", "type": "invalid_request_error"}}
                    err.append({"id": f"batch_req_{n}", "custom_id": cid, "error": None,
                                "response": {"status_code": 400, "request_id": f"req_{n}", "body": fail}})  # fmt: skip
                else:
                    done = openai_completion(text, model=body["model"]).body
                    out.append({"id": f"batch_req_{n}", "custom_id": cid, "error": None,
                                "response": {"status_code": 200, "request_id": f"req_{n}", "body": done}})  # fmt: skip
            batch["output_file_id"] = self._store_lines(out)
            batch["error_file_id"] = self._store_lines(err) if err else None
        n = len(batch["requests"])
        return {
            "id": bid, "object": "batch", "endpoint": batch["input"]["endpoint"], "errors": None,
            "input_file_id": batch["input"]["input_file_id"], "completion_window": "24h",
            "status": "completed" if ended else "in_progress",
            "output_file_id": batch.get("output_file_id"), "error_file_id": batch.get("error_file_id"),
            "created_at": 0, "in_progress_at": 1, "expires_at": 86400, "finalizing_at": None,
            "completed_at": 2 if ended else None, "failed_at": None, "expired_at": None, "cancelling_at": None,
            "cancelled_at": None, "request_counts": {"total": n, "completed": n if ended else 0, "failed": 0},
            "metadata": None,
        }  # fmt: skip

    def _store_lines(self, rows: list[dict[str, Any]]) -> str:
        fid = f"file-{len(self.files) + 1:04d}"
        self.files[fid] = ("\n".join(json.dumps(r) for r in rows) + "\n").encode()
        return fid

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                self._send(*server._batch_get(self.path))

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                batch = server._batch_post(self.path, headers, raw)
                if batch is not None:
                    self._send(*batch)
                    return
                body = json.loads(raw) if raw else {}
                received = Received(self.path, headers, body)
                scripted = server._next(self.path, received)
                if scripted.delay_s:
                    time.sleep(scripted.delay_s)
                self._send(scripted.status, json.dumps(scripted.body).encode(), scripted.headers)

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


def _multipart(content_type: str, raw: bytes) -> dict[str, bytes]:
    """The fields of a multipart/form-data body (what the OpenAI SDK sends to upload a file)."""
    boundary = content_type.split("boundary=", 1)[1].strip().strip('"').encode()
    fields: dict[str, bytes] = {}
    for part in raw.split(b"--" + boundary):
        if b"\r\n\r\n" not in part:
            continue
        head, _, value = part.partition(b"\r\n\r\n")
        name = head.split(b'name="', 1)[1].split(b'"', 1)[0].decode() if b'name="' in head else ""
        fields[name] = value[:-2] if value.endswith(b"\r\n") else value
    return fields
