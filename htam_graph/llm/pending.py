"""Requests waiting for a reply that comes later: the files a run leaves in `OUT/pending/` and reads back.

A run that stops `awaiting_reply` at step N writes, in its folder's `pending/`:

- `step_N.request.json`: the request (rendered prompt, the `GenerationRequest`, the direction drawn and the
  policy's random state after the draw, the run key and configuration), enough to resume exactly there;
- `step_N.request.md`: the same prompt, readable, as the model is to see it.

The reply goes to `step_N.reply.md` (the model's whole answer, as text), optionally with `step_N.reply.json`
(`model`, `usage`, `finish_reason`: what a batch job reports). A request that failed for good (a batch result
that errored) gets `step_N.reply.error` instead: the step is then recorded as an infrastructure failure. Once
the step is done its pending files are removed (the reply and the request are kept as
`candidates/step_N.reply.md` and `candidates/step_N.request.md`).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from htam_graph.errors import ConfigError
from htam_graph.llm.prompts import RenderedPrompt
from htam_graph.model import DirectionScore, GenerationRequest, Usage
from htam_graph.runtypes import PendingStep

__all__ = [
    "PENDING_DIR",
    "PendingFile",
    "SavedReply",
    "awaiting_requests",
    "clear_step",
    "prompt_as_text",
    "read_pending",
    "read_reply",
    "write_pending",
    "write_reply",
    "write_reply_error",
]

PENDING_DIR = "pending"
_FORMAT = 1


def prompt_as_text(prompt: RenderedPrompt | Mapping[str, str]) -> str:
    """The request as one text, its parts clearly delimited (what a command reads on stdin)."""
    parts = _parts(prompt)
    blocks = [f"<{name}>\n{text.strip()}\n</{name}>" for name, text in parts.items() if text.strip()]
    return "\n\n".join(blocks) + "\n"


def _parts(prompt: RenderedPrompt | Mapping[str, str]) -> dict[str, str]:
    if isinstance(prompt, RenderedPrompt):
        return {"system": prompt.system, "memory": prompt.memory, "user": prompt.user}
    return {name: str(prompt.get(name) or "") for name in ("system", "memory", "user")}


def _path(pending_dir: Path, step: int, suffix: str) -> Path:
    return pending_dir / f"step_{step}.{suffix}"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)  # atomic: a reader never sees half a file


@dataclass(frozen=True)
class PendingFile:
    """A pending request read back: the loop's `PendingStep`, and what the run recorded beside it."""

    pending: PendingStep
    run_key: str
    task_key: str
    config: dict[str, Any]
    path: Path


def write_pending(
    pending_dir: Path, pending: PendingStep, *, run_key: str, task_key: str, config: Mapping[str, Any]
) -> Path:
    """Write `step_N.request.json` and `step_N.request.md`; returns the path where the reply is expected."""
    pending_dir.mkdir(parents=True, exist_ok=True)
    version, internal, gauss = pending.rng_state
    data = {
        "format": _FORMAT,
        "run_key": run_key,
        "task_key": task_key,
        "step": pending.step,
        "backend": pending.backend,
        "config": dict(config),
        "prompt": _parts(pending.prompt),
        "request": pending.request.model_dump(mode="json"),
        "direction": pending.direction.model_dump(mode="json"),
        "rng_state": [version, list(internal), gauss],  # type: ignore[call-overload]
    }
    reply = _path(pending_dir, pending.step, "reply.md")
    _write(_path(pending_dir, pending.step, "request.json"), json.dumps(data, indent=1) + "\n")
    header = (
        f"<!-- htam-graph: step {pending.step} of {task_key} (run {run_key}). Save the model's whole answer "
        f"to {reply.name} beside this file, then run the same command again. -->\n\n"
    )
    _write(_path(pending_dir, pending.step, "request.md"), header + prompt_as_text(pending.prompt))
    return reply


def read_pending(pending_dir: Path, step: int) -> PendingFile | None:
    """The request pending at `step`, or None when there is none; `ConfigError` when it does not read back."""
    path = _path(pending_dir, step, "request.json")
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != _FORMAT or int(data["step"]) != step:
            raise ValueError(f"format {data.get('format')!r}, step {data.get('step')!r}")
        version, internal, gauss = data["rng_state"]
        state = (int(version), tuple(int(x) for x in internal), gauss)
        random.Random().setstate(state)  # validates it
        pending = PendingStep(
            step=step,
            request=GenerationRequest.model_validate(data["request"]),
            direction=DirectionScore.model_validate(data["direction"]),
            rng_state=state,
            prompt={k: str(v) for k, v in data["prompt"].items()},
            backend=str(data.get("backend") or ""),
        )
        return PendingFile(pending, str(data["run_key"]), str(data["task_key"]), dict(data["config"]), path)
    except (OSError, ValueError, KeyError, TypeError, ValidationError) as e:
        raise ConfigError(f"{path} is not a pending request htam-graph can resume ({e}); remove it") from e


@dataclass(frozen=True)
class SavedReply:
    """A reply saved for a pending step: its text and what came with it, or the error that replaced it."""

    text: str | None
    model: str = ""
    usage: Usage | None = None
    finish_reason: str = ""
    error: str | None = None


def read_reply(pending_dir: Path, step: int) -> SavedReply | None:
    """The reply saved for `step`, or None while there is none."""
    error = _path(pending_dir, step, "reply.error")
    if error.is_file():
        return SavedReply(None, error=error.read_text(encoding="utf-8").strip() or "the request failed")
    path = _path(pending_dir, step, "reply.md")
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    meta_path = _path(pending_dir, step, "reply.json")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
        usage = Usage.model_validate(meta["usage"]) if meta.get("usage") else None
    except (OSError, ValueError, ValidationError) as e:
        raise ConfigError(f"{meta_path} does not read back ({e}); fix or remove it") from e
    return SavedReply(
        text, str(meta.get("model") or ""), usage, str(meta.get("finish_reason") or ""), error=None
    )


def write_reply(pending_dir: Path, step: int, text: str, meta: Mapping[str, Any] | None = None) -> None:
    """Save a reply for `step` (the metadata first, so a reader that sees the reply sees its metadata)."""
    if meta:
        _write(_path(pending_dir, step, "reply.json"), json.dumps(dict(meta), indent=1) + "\n")
    _write(_path(pending_dir, step, "reply.md"), text)


def write_reply_error(pending_dir: Path, step: int, message: str) -> None:
    """Record that the request of `step` failed for good (the step becomes an infrastructure failure)."""
    _write(_path(pending_dir, step, "reply.error"), message.strip() + "\n")


def clear_step(pending_dir: Path, step: int) -> None:
    """Remove the pending files of a step that is done."""
    for suffix in ("request.json", "request.md", "reply.md", "reply.json", "reply.error"):
        _path(pending_dir, step, suffix).unlink(missing_ok=True)
    if pending_dir.is_dir() and not any(pending_dir.iterdir()):
        pending_dir.rmdir()


def awaiting_requests(root: Path) -> list[Path]:
    """Every `pending/step_N.request.json` under `root` that has no reply yet, sorted."""
    found = []
    for path in sorted(root.rglob(f"{PENDING_DIR}/step_*.request.json")):
        step = path.name.split(".", 1)[0]
        if not (
            path.with_name(f"{step}.reply.md").exists() or path.with_name(f"{step}.reply.error").exists()
        ):
            found.append(path)
    return found
