"""Registry wiring, the scripted fake through the real registry path, and record -> replay round trips."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from htam_graph.errors import AwaitingReply, BackendError, BudgetExceeded, ConfigError
from htam_graph.llm import BudgetTracker, RecordingGenerator, ReplayGenerator, make_generator
from htam_graph.llm.fake import ScriptedGenerator, scripted_factory
from htam_graph.llm.registry import known_backends, register_backend, unregister_backend
from htam_graph.model import GenerationRequest, GlobalDirection, Language, LocalStrategy, Task

CODE = "import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x  # v{n}\n"


def reply(n: int) -> str:
    return f"Attempt {n}:\n```python\n{CODE.format(n=n)}```\n"


def make_request(
    step: int = 0, task_key: str = "kb/level1/19_ReLU", strategy: str = "vec"
) -> GenerationRequest:
    task = Task(
        key=task_key,
        suite="kb",
        level=1,
        name=task_key.rsplit("/", 1)[-1],
        source="class Model: ...\n",
        source_sha256="0" * 64,
    )
    return GenerationRequest(
        task=task,
        step=step,
        direction=GlobalDirection(key="mem", name="Memory", intent="fewer bytes"),
        strategy=LocalStrategy(
            key=strategy, name=strategy, global_key="mem", languages=[Language.TRITON], pattern="p"
        ),
        base_source="",
        language=Language.TRITON,
        state_summary="",
    )


@pytest.fixture
def scripted() -> Iterator[list[str]]:
    """Registers the scripted fake as backend `scripted` (the same path as the real backends)."""
    replies: list[str] = []
    register_backend("scripted", scripted_factory(replies, cost_per_call_usd=0.25))
    yield replies
    unregister_backend("scripted")


def test_importing_the_package_loads_no_sdk() -> None:
    code = "import sys, htam_graph.llm, htam_graph.llm.registry; print(sorted(m for m in ('anthropic', 'openai', 'torch') if m in sys.modules))"
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_unknown_backend_lists_the_known_ones() -> None:
    # `rules` joins the list once htam_graph.generators (the composition root) is imported: see test_generators.py
    known = ", ".join(known_backends())
    with pytest.raises(BackendError, match=f"^unknown LLM backend 'gpt-4': choose one of {known}$"):
        make_generator("gpt-4", env={})
    assert {"anthropic", "openai", "replay", "llm", "command", "files", "batch"} <= set(known_backends())
    with pytest.raises(ValueError):
        register_backend("anthropic", lambda options: ScriptedGenerator([]))


def test_scripted_backend_through_the_registry(scripted: list[str]) -> None:
    scripted.extend([reply(1), "no code here"])
    budget = BudgetTracker(limit_usd=0.5)
    gen = make_generator("scripted", env={}, budget=budget)
    assert isinstance(gen, ScriptedGenerator) and gen.name == "scripted:scripted"
    first = gen.generate(make_request(0))
    assert first.source == CODE.format(n=1) and first.error is None
    second = gen.generate(make_request(1))
    assert second.source is None and second.error is not None and "no code" in second.error
    assert budget.totals().cost_usd == pytest.approx(0.5)
    with pytest.raises(BudgetExceeded):
        gen.generate(make_request(2))
    assert len(gen.client.prompts) == 2
    assert "kb/level1/19_ReLU" in gen.client.prompts[0].user


def test_record_then_replay_reproduces_the_replies(tmp_path: Path, scripted: list[str]) -> None:
    scripted.extend([reply(1), reply(2), "I give up."])
    path = tmp_path / "rec" / "run.jsonl"
    recorder = make_generator("scripted", env={}, record_path=path)
    assert isinstance(recorder, RecordingGenerator)
    requests = [make_request(0), make_request(1), make_request(0, task_key="kb/level1/20_LeakyReLU")]
    originals = [recorder.generate(r) for r in requests]

    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["match"]["step"] for line in lines] == [0, 1, 0]
    assert lines[0]["match"] == {
        "task_key": "kb/level1/19_ReLU",
        "step": 0,
        "strategy": "vec",
        "direction": "mem",
    }
    assert lines[0]["usage"]["cost_usd"] == 0.25

    replay = make_generator(f"replay:{path}", env={})
    assert replay.name == "replay:run.jsonl"
    # asked in another order: matched by (task_key, step), not by position
    replayed = {r.task.key + str(r.step): replay.generate(r) for r in reversed(requests)}
    for request, original in zip(requests, originals, strict=True):
        again = replayed[request.task.key + str(request.step)]
        assert (again.source, again.raw_text, again.error) == (
            original.source,
            original.raw_text,
            original.error,
        )
        assert again.usage.cost_usd == 0.0  # replaying costs nothing
    with pytest.raises(AwaitingReply, match="no recorded reply for kb/level1/19_ReLU step 0") as awaited:
        replay.generate(requests[0])  # the run stops awaiting that reply, its request written out
    assert "kb/level1/19_ReLU" in awaited.value.prompt["user"]


def test_replay_fallbacks_and_never_another_task(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    records = [
        {"match": {"task_key": "kb/a", "step": 5}, "reply": reply(5)},
        {"reply": reply(7)},  # hand-written: no key
        {"match": {"task_key": "kb/other", "step": 0}, "reply": reply(9)},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    gen = ReplayGenerator(path)
    assert gen.generate(make_request(0, task_key="kb/a")).source == CODE.format(n=5)  # same task, other step
    assert gen.generate(make_request(1, task_key="kb/a")).source == CODE.format(n=7)  # then unkeyed, in order
    with pytest.raises(AwaitingReply):
        gen.generate(make_request(2, task_key="kb/a"))  # kb/other's reply is never used for kb/a


def test_bad_replay_files(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="does not exist"):
        make_generator(f"replay:{tmp_path / 'nope.jsonl'}", env={})
    with pytest.raises(BackendError, match="needs a file"):
        make_generator("replay", env={})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"reply": "ok"}\n{"match": {}}\n')
    with pytest.raises(ConfigError, match="bad.jsonl line 2"):
        ReplayGenerator(bad)
    bad.write_text("not json\n")
    with pytest.raises(ConfigError, match="line 1"):
        ReplayGenerator(bad)


def test_recorder_records_nothing_when_the_call_fails(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    gen = RecordingGenerator(ScriptedGenerator([BackendError("boom")]), path)
    with pytest.raises(BackendError, match="boom"):
        gen.generate(make_request())
    assert not path.exists()
