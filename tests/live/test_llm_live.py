"""One tiny real call per provider. Off by default (marker `live`) and skipped without a key.

Run: `pytest -m live tests/live/test_llm_live.py`. Anthropic uses claude-haiku-4-5 under a $0.10 budget.
The OpenAI-compatible call uses $HTAM_LIVE_OPENAI_MODEL (default deepseek-chat; with OPENAI_BASE_URL unset a
deepseek-* model goes to api.deepseek.com, so OPENAI_API_KEY must be a DeepSeek key then).
"""

from __future__ import annotations

import os

import pytest

from htam_graph.llm import BudgetTracker, RetryPolicy, make_generator
from htam_graph.model import GenerationRequest, GlobalDirection, Language, Task

pytestmark = pytest.mark.live

RELU = "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"


def tiny_request() -> GenerationRequest:
    task = Task(
        key="live/relu",
        suite="live",
        level=1,
        name="ReLU",
        source=RELU,
        source_sha256="0" * 64,
        op_tags=["elementwise"],
    )
    return GenerationRequest(
        task=task,
        step=0,
        direction=GlobalDirection(
            key="basic", name="First kernel", intent="Write a straightforward correct kernel."
        ),
        strategy=None,
        base_source=RELU.replace("class Model", "class ModelNew"),
        language=Language.TRITON,
        state_summary="",
    )


@pytest.mark.skipif(not os.environ.get("ANTHROPIC_API_KEY"), reason="ANTHROPIC_API_KEY is not set")
def test_anthropic_live() -> None:
    budget = BudgetTracker(limit_usd=0.10)
    gen = make_generator(
        "anthropic:claude-haiku-4-5",
        budget=budget,
        max_tokens=2048,
        timeout_s=120,
        retry=RetryPolicy(max_attempts=2),
    )
    reply = gen.generate(tiny_request())
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0
    assert 0 < reply.usage.cost_usd < 0.10 and reply.usage.cost_known
    assert reply.source is not None, reply.error
    assert "class ModelNew" in reply.source and "triton.jit" in reply.source


@pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="OPENAI_API_KEY is not set")
def test_openai_compatible_live() -> None:
    model = os.environ.get("HTAM_LIVE_OPENAI_MODEL", "deepseek-chat")
    gen = make_generator(f"openai:{model}", max_tokens=2048, timeout_s=180, retry=RetryPolicy(max_attempts=2))
    reply = gen.generate(tiny_request())
    assert reply.usage.input_tokens + reply.usage.cache_read_tokens > 0 and reply.usage.output_tokens > 0
    assert reply.source is not None, reply.error
    assert "class ModelNew" in reply.source
