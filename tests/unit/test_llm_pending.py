"""The pending-request files (`htam_graph.llm.pending`) and the reply box every run reads (`InboxGenerator`)."""

from __future__ import annotations

import json
import random
import runpy
from pathlib import Path

import pytest

from htam_graph.errors import AwaitingReply, ConfigError, StepInfraError
from htam_graph.llm.deferred import FilesGenerator, InboxGenerator
from htam_graph.llm.pending import (
    awaiting_requests,
    clear_step,
    read_pending,
    write_pending,
    write_reply,
    write_reply_error,
)
from htam_graph.model import DirectionScore, GenerationRequest, Usage
from htam_graph.runtypes import PendingStep

make_request = runpy.run_path(str(Path(__file__).with_name("test_llm_replay_registry.py")))["make_request"]


def pending_at(step: int, rng: random.Random | None = None) -> PendingStep:
    rng = rng or random.Random(7)
    rng.random()  # a state part-way through a stream
    request: GenerationRequest = make_request(step=step)
    return PendingStep(
        step=step,
        request=request,
        direction=DirectionScore(key="mem", score=1.5, support=3, probability=0.4),
        rng_state=rng.getstate(),
        prompt={"system": "S", "memory": "", "user": "U"},
        backend="files",
    )


def test_a_pending_request_reads_back_exactly(tmp_path: Path) -> None:
    root, tmp_path = tmp_path, tmp_path / "pending"
    rng = random.Random(7)
    pending = pending_at(2, rng)
    reply = write_pending(
        tmp_path, pending, run_key="run-1", task_key=pending.request.task.key, config={"a": 1}
    )
    assert reply == tmp_path / "step_2.reply.md" and not reply.exists()
    back = read_pending(tmp_path, 2)
    assert (
        back is not None and back.pending == pending and back.run_key == "run-1" and back.config == {"a": 1}
    )
    resumed = random.Random()
    resumed.setstate(back.pending.rng_state)
    assert [resumed.random() for _ in range(3)] == [rng.random() for _ in range(3)]  # the same stream goes on
    text = (tmp_path / "step_2.request.md").read_text(encoding="utf-8")
    assert text.splitlines()[0].startswith("<!-- htam-graph: step 2 of kb/level1/19_ReLU (run run-1)")
    assert (
        "<system>\nS\n</system>\n\n<user>\nU\n</user>\n" in text and "<memory>" not in text
    )  # empty: left out
    assert read_pending(tmp_path, 3) is None
    assert awaiting_requests(root) == [tmp_path / "step_2.request.json"]


def test_a_damaged_pending_request_is_a_one_line_error(tmp_path: Path) -> None:
    pending = pending_at(1)
    write_pending(tmp_path, pending, run_key="r", task_key="t", config={})
    path = tmp_path / "step_1.request.json"
    data = json.loads(path.read_text())
    data["rng_state"] = [3, [1, 2], None]
    path.write_text(json.dumps(data))
    with pytest.raises(
        ConfigError, match="step_1.request.json is not a pending request htam-graph can resume"
    ):
        read_pending(tmp_path, 1)


class Asked:
    name = "inner"

    def __init__(self) -> None:
        self.asked: list[int] = []

    def generate(self, request: GenerationRequest) -> object:
        self.asked.append(request.step)
        raise AwaitingReply("later", prompt={})


def test_the_reply_box_answers_only_the_request_written_beside_it(tmp_path: Path) -> None:
    root, tmp_path = tmp_path, tmp_path / "pending"
    pending = pending_at(2)
    write_pending(tmp_path, pending, run_key="r", task_key=pending.request.task.key, config={})
    inner = Asked()
    box = InboxGenerator(inner, tmp_path)  # type: ignore[arg-type]
    with pytest.raises(AwaitingReply):
        box.generate(pending.request)  # no reply saved yet: the inner generator is asked
    usage = Usage(input_tokens=10, output_tokens=5, cost_usd=0.01)
    write_reply(
        tmp_path,
        2,
        "STRATEGY: vec\nno code",
        {"model": "m", "usage": usage.model_dump(), "finish_reason": "length"},
    )
    reply = box.generate(pending.request)
    assert reply.raw_text == "STRATEGY: vec\nno code" and reply.model == "m" and reply.usage == usage
    assert reply.truncated and reply.strategy_key == "vec" and reply.source is None
    other = pending.request.model_copy(update={"state_summary": "a fresh run's request"})
    with pytest.raises(AwaitingReply):
        box.generate(other)  # the same step of another request: never answered by that file
    assert inner.asked == [2, 2]
    assert awaiting_requests(root) == []  # answered
    write_reply_error(tmp_path, 2, "anthropic batch msgbatch_1: errored")
    with pytest.raises(StepInfraError, match="errored"):
        box.generate(pending.request)
    clear_step(tmp_path, 2)
    assert not tmp_path.exists()


def test_the_files_backend_always_awaits(tmp_path: Path) -> None:
    with pytest.raises(AwaitingReply) as awaited:
        FilesGenerator().generate(make_request(step=1))
    assert (
        set(awaited.value.prompt) == {"system", "memory", "user"}
        and "kb/level1/19_ReLU" in awaited.value.prompt["user"]
    )
