"""Record real replies once, replay them in CI and demos (`--backend replay:FILE`).

The file is JSON Lines, one call per line:

    {"match": {"task_key": "kernelbench/level1/19_ReLU", "step": 0, "strategy": "tri_vectorize",
               "direction": "memory"},
     "reply": "...the model's raw answer text...", "model": "claude-sonnet-4-6",
     "usage": {"input_tokens": 1200, "output_tokens": 900, ...}}

Matching: a request takes the first unused record with the same `task_key` and `step`; failing that, the
first unused record of the same task (the loop took another path), then the first unused record without a
`task_key` (so a file written by hand, without keys, replays in order). A record of another task is never
used: when nothing fits, the replay raises `AwaitingReply`, so the run stops at that step with its request
written out; add the reply to the file (or save it as the pending reply file) and run the same command again.
A resumed run first marks the records its earlier steps used (`resumed`), so it matches as an uninterrupted
run would have.
A record that names its direction is also a choice to follow (`recorded_choice`): the loop takes the
recorded direction and strategy at that step instead of drawing, so a replay of a recorded run asks what the
run asked, whatever the replaying memory holds. A strategy that differs from the recorded one (the loop could
not follow it) is logged, not refused (the reply is still what the model said at that step). Code is
re-extracted from the raw reply on replay, so the extractor's behaviour is the current one. Replayed replies
cost nothing: their usage is reported as zero; the recorded usage stays in the file.
"""

from __future__ import annotations

import fcntl
import json
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from htam_graph.errors import AwaitingReply, ConfigError
from htam_graph.llm.generator import reply_from_text
from htam_graph.llm.prompts import load_templates, render_prompt
from htam_graph.llm.wrapper import WrappedGenerator
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
    finish_reason: str = ""
    latency_s: float | None = None


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

    def __init__(self, path: Path, templates_dir: Path | None = None) -> None:
        self.path = path
        self.name = f"replay:{path.name}"
        self._records = read_records(path)
        self._used = [False] * len(self._records)
        self._lock = threading.Lock()
        self._templates_dir = templates_dir

    def generate(self, request: GenerationRequest) -> GenerationReply:
        """The recorded reply for `request`; `AwaitingReply` when the file has none for it."""
        started = time.perf_counter()
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
        return reply_from_text(
            record.reply,
            model=f"replay:{record.model}" if record.model else self.name,
            stop_reason=record.finish_reason,
            latency_s=time.perf_counter() - started,
        )

    def resumed(self, task_key: str, steps: Sequence[int]) -> None:
        """Mark the records that the steps a resumed run made before would have used, in order."""
        with self._lock:
            for step in steps:
                index = self._find(task_key, step)
                if index is not None:
                    self._used[index] = True

    def recorded_choice(self, task_key: str, step: int) -> tuple[str, str | None] | None:
        """The direction and strategy of the record this step would take, when it names a direction."""
        with self._lock:
            index = self._find(task_key, step)
        if index is None:
            return None
        match = self._records[index].match
        if match.direction is None or match.task_key != task_key or match.step != step:
            return None
        return match.direction, match.strategy

    def _take(self, request: GenerationRequest) -> ReplayRecord:
        with self._lock:
            index = self._find(request.task.key, request.step)
            if index is not None:
                self._used[index] = True
                return self._records[index]
        prompt = render_prompt(request, load_templates(self._templates_dir))
        raise AwaitingReply(
            f"{self.name}: no recorded reply for {request.task.key} step {request.step} "
            f"({len(self._records)} record(s), all used or of other tasks)",
            prompt={"system": prompt.system, "memory": prompt.memory, "user": prompt.user},
        )

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


class RecordingGenerator(WrappedGenerator):
    """Wraps a generator and appends each (request, reply) pair to a replay file as it runs (a replay bank).

    Appends are whole lines under an exclusive lock, so the workers of a bench can share one file. A call
    that raised (an infrastructure failure, a reply still awaited) records nothing."""

    def __init__(self, inner: Generator, path: Path) -> None:
        super().__init__(inner)
        self.path = path
        self._lock = threading.Lock()

    def generate(self, request: GenerationRequest) -> GenerationReply:
        """Call the inner generator, then record its reply."""
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
            finish_reason=reply.finish_reason,
            latency_s=reply.latency_s,
        )
        line = json.dumps(record.model_dump(mode="json"), ensure_ascii=False) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                try:
                    f.write(line)
                    f.flush()
                finally:
                    fcntl.flock(f, fcntl.LOCK_UN)
        return reply
