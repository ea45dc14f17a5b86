"""Record real replies once, replay them in CI and demos (`--backend replay:FILE`).

The file is JSON Lines, one call per line:

    {"match": {"task_key": "kernelbench/level1/19_ReLU", "step": 0, "strategy": "tri_vectorize",
               "direction": "memory"},
     "reply": "...the model's raw answer text...", "model": "claude-sonnet-4-6",
     "usage": {"input_tokens": 1200, "output_tokens": 900, ...}}

Matching: a request takes the first unused record with the same `task_key` and `step`; failing that, the
first unused record of the same task (the loop took another path), then the first unused record without a
`task_key` (so a file written by hand, without keys, replays in order). A record of another task is never
used: when nothing fits, the replay raises `BackendError`.
A strategy that differs from the recorded one is logged, not refused (the reply is still what the model
said at that step). Code is re-extracted from the raw reply on replay, so the extractor's behaviour is
the current one. Replayed replies cost nothing: their usage is reported as zero; the recorded usage stays
in the file.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from htam_graph.errors import BackendError, ConfigError
from htam_graph.llm.extract import extract_code
from htam_graph.llm.generator import chosen_strategy
from htam_graph.model import GenerationReply, GenerationRequest
from htam_graph.ports import Generator

log = logging.getLogger(__name__)


class ReplayMatch(BaseModel):
    """The request a recorded reply answered."""

    model_config = ConfigDict(frozen=True, extra="allow")

    task_key: str | None = None
    step: int | None = None
    strategy: str | None = None
    direction: str | None = None


class ReplayRecord(BaseModel):
    """One line of a replay file."""

    model_config = ConfigDict(frozen=True, extra="allow")

    match: ReplayMatch = Field(default_factory=ReplayMatch)
    reply: str
    model: str = ""
    usage: dict[str, Any] = Field(default_factory=dict)


def read_records(path: Path) -> list[ReplayRecord]:
    """Parse a replay file; a malformed line is a `ConfigError` naming the file and line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read replay file {path}: {e.strerror or e}") from e
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(ReplayRecord.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValidationError) as e:
            first = str(e).splitlines()[0]
            raise ConfigError(f"replay file {path} line {number}: not a replay record ({first})") from e
    return records


class ReplayGenerator:
    """Answers requests from a recorded file (see the module docstring for the matching rule)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = f"replay:{path.name}"
        self._records = read_records(path)
        self._used = [False] * len(self._records)
        self._lock = threading.Lock()

    def generate(self, request: GenerationRequest) -> GenerationReply:
        """The recorded reply for `request`; `BackendError` when the file has none left."""
        record = self._take(request)
        strategy = request.strategy.key if request.strategy else None
        if record.match.strategy is not None and record.match.strategy != strategy:
            log.info(
                "%s step %d: recorded strategy %s, requested %s",
                self.name,
                request.step,
                record.match.strategy,
                strategy,
            )
        result = extract_code(record.reply)
        return GenerationReply(
            source=result.source,
            raw_text=record.reply,
            error=None if result.source is not None else result.reason,
            model=f"replay:{record.model}" if record.model else self.name,
            strategy_key=chosen_strategy(record.reply, request),
        )

    def _take(self, request: GenerationRequest) -> ReplayRecord:
        with self._lock:
            index = self._find(request.task.key, request.step)
            if index is None:
                raise BackendError(
                    f"{self.name}: no recorded reply left for {request.task.key} step {request.step} "
                    f"({len(self._records)} record(s), all used)"
                )
            self._used[index] = True
            return self._records[index]

    def _find(self, task_key: str, step: int) -> int | None:
        free = [i for i, used in enumerate(self._used) if not used]
        for i in free:
            match = self._records[i].match
            if match.task_key == task_key and match.step == step:
                return i
        for wanted in (task_key, None):  # same task at another step, then unkeyed records, in file order
            for i in free:
                if self._records[i].match.task_key == wanted:
                    return i
        return None


class RecordingGenerator:
    """Wraps a real generator and appends each (request, reply) pair to a replay file as it runs."""

    def __init__(self, inner: Generator, path: Path) -> None:
        self.inner = inner
        self.path = path
        self.name = inner.name
        self._lock = threading.Lock()

    def generate(self, request: GenerationRequest) -> GenerationReply:
        """Call the inner generator, then record its reply (a failed call records nothing)."""
        reply = self.inner.generate(request)
        record = ReplayRecord(
            match=ReplayMatch(
                task_key=request.task.key,
                step=request.step,
                strategy=request.strategy.key if request.strategy else None,
                direction=request.direction.key,
            ),
            reply=reply.raw_text,
            model=reply.model,
            usage=reply.usage.model_dump(),
        )
        line = json.dumps(record.model_dump(mode="json"), ensure_ascii=False)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
        return reply
