"""One contract for every generator backend: the fake and the real adapters (against a local fake server)."""

from __future__ import annotations

import json
import runpy
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from htam_graph.llm import make_generator
from htam_graph.llm.fake import scripted_factory
from htam_graph.llm.registry import register_backend, unregister_backend
from htam_graph.model import GenerationReply, GenerationRequest, GlobalDirection, Language, Task
from htam_graph.ports import Generator

fls = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]("fake_llm_server")

GOOD = "```python\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n```"
UNUSABLE = [
    "I would tile the loop, but I am not sure.",  # prose only
    "```python\nclass Model(nn.Module):\n    pass\n```",  # no ModelNew
    "```python\nclass ModelNew(nn.Module:\n```",  # syntax error
    "",  # empty
]
REPLIES = [GOOD, *UNUSABLE]


def make_request(step: int) -> GenerationRequest:
    task = Task(
        key="kb/level1/19_ReLU",
        suite="kb",
        level=1,
        name="19_ReLU",
        source="class Model: ...\n",
        source_sha256="0" * 64,
    )
    return GenerationRequest(
        task=task,
        step=step,
        direction=GlobalDirection(key="mem", name="Memory", intent="fewer bytes"),
        strategy=None,
        base_source="",
        language=Language.TRITON,
        state_summary="",
    )


Builder = Callable[[list[str], Path], Generator]


def _scripted(replies: list[str], tmp: Path) -> Generator:
    register_backend("scripted", scripted_factory(replies), replace=True)
    return make_generator("scripted", env={})


def _replay(replies: list[str], tmp: Path) -> Generator:
    path = tmp / "replay.jsonl"
    path.write_text(
        "".join(
            json.dumps({"match": {"task_key": "kb/level1/19_ReLU", "step": i}, "reply": r}) + "\n"
            for i, r in enumerate(replies)
        )
    )
    return make_generator(f"replay:{path}", env={})


@pytest.fixture
def server() -> Iterator[fls.FakeLLMServer]:
    with fls.FakeLLMServer() as s:
        yield s


@pytest.fixture(params=["scripted", "replay", "anthropic", "openai"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, server: fls.FakeLLMServer) -> Iterator[Generator]:
    name = request.param
    if name == "scripted":
        yield _scripted(REPLIES, tmp_path)
        unregister_backend("scripted")
    elif name == "replay":
        yield _replay(REPLIES, tmp_path)
    elif name == "anthropic":
        for text in REPLIES:
            server.enqueue(fls.MESSAGES, fls.anthropic_message(text))
        yield make_generator("anthropic", env={"ANTHROPIC_API_KEY": "k"}, base_url=server.url)
    else:
        for text in REPLIES:
            server.enqueue(fls.CHAT, fls.openai_completion(text, reasoning_content="thinking"))
        yield make_generator("openai:deepseek-chat", env={"OPENAI_API_KEY": "k"}, base_url=server.url + "/v1")


def test_generator_contract(backend: Generator) -> None:
    assert isinstance(backend, Generator)
    assert backend.name
    replies: list[GenerationReply] = [backend.generate(make_request(step)) for step in range(len(REPLIES))]
    for reply in replies:
        assert isinstance(reply, GenerationReply)
        assert (reply.source is None) != (
            reply.error is None
        )  # code, or a reason why not: never both, never neither
        usage = reply.usage
        assert (
            min(usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens)
            >= 0
        )
        assert usage.cost_usd >= 0.0
    good, *unusable = replies
    assert good.source is not None and "class ModelNew" in good.source
    assert good.raw_text.strip() == GOOD
    for reply in unusable:
        assert reply.source is None and reply.error
