"""The Anthropic and OpenAI-compatible backends against a local fake HTTP server (127.0.0.1 only)."""

from __future__ import annotations

import runpy
from collections.abc import Iterator
from pathlib import Path

import pytest

from htam_graph.errors import BackendError, BudgetExceeded, StepInfraError
from htam_graph.llm import BudgetTracker, RetryPolicy, make_generator
from htam_graph.llm.pricing import lookup_price
from htam_graph.model import GenerationRequest, GlobalDirection, Language, LocalStrategy, Task

fls = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]("fake_llm_server")

CODE = (
    "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n\n"
    "@triton.jit\ndef k(x_ptr, y_ptr, n, B: tl.constexpr):\n"
    "    o = tl.program_id(0) * B + tl.arange(0, B)\n"
    "    tl.store(y_ptr + o, tl.maximum(tl.load(x_ptr + o, mask=o < n), 0.0), mask=o < n)\n\n\n"
    "class ModelNew(nn.Module):\n    def forward(self, x):\n        y = torch.empty_like(x)\n"
    "        k[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), B=256)\n        return y\n"
)
REPLY = "Vectorised ReLU:\n\n```python\n" + CODE + "```\n"
MEMORY = "Pattern: one program per BLOCK elements. Evidence: 3 wins on elementwise ops. " * 20


def make_request(step: int = 0) -> GenerationRequest:
    task = Task(
        key="kernelbench/level1/19_ReLU",
        suite="kernelbench",
        level=1,
        name="19_ReLU",
        source="import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n",
        source_sha256="0" * 64,
        op_tags=["elementwise"],
    )
    return GenerationRequest(
        task=task,
        step=step,
        direction=GlobalDirection(key="memory_access", name="Memory access", intent="Move fewer bytes."),
        strategy=LocalStrategy(
            key="tri_vec",
            name="Vectorised loads",
            global_key="memory_access",
            languages=[Language.TRITON],
            pattern="Wide loads.",
        ),
        base_source="class ModelNew: pass\n",
        language=Language.TRITON,
        state_summary="last: compile error: NameError: tl",
        memory_context=MEMORY,
    )


class SleepRecorder:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def server() -> Iterator[fls.FakeLLMServer]:
    with fls.FakeLLMServer() as s:
        yield s


def fast_retry(attempts: int = 3) -> tuple[RetryPolicy, SleepRecorder]:
    sleeper = SleepRecorder()
    return RetryPolicy(max_attempts=attempts, base_delay_s=0.5, max_delay_s=10.0, sleep=sleeper), sleeper


ANTHROPIC_ENV = {"ANTHROPIC_API_KEY": "sk-test-anthropic"}
OPENAI_ENV = {"OPENAI_API_KEY": "sk-test-openai"}


# ------------------------------------------------------------------------------------------------ anthropic
def test_anthropic_success_sends_cached_system_blocks_and_accounts_usage(server: fls.FakeLLMServer) -> None:
    server.enqueue(
        fls.MESSAGES,
        fls.anthropic_message(
            REPLY, input_tokens=1000, output_tokens=2000, cache_write=3000, cache_read=4000, thinking="hmm"
        ),
    )
    budget = BudgetTracker(limit_usd=5.0)
    gen = make_generator(
        "anthropic:claude-sonnet-4-6", env=ANTHROPIC_ENV, base_url=server.url, budget=budget, max_tokens=1234
    )
    reply = gen.generate(make_request())

    assert gen.name == "anthropic:claude-sonnet-4-6"
    assert reply.error is None
    assert reply.source == CODE
    assert reply.model == "claude-sonnet-4-6"  # what the server says it ran
    usage = reply.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_write_tokens, usage.cache_read_tokens) == (
        1000,
        2000,
        3000,
        4000,
    )
    # sonnet 4.6: $3 in, $15 out, 5-minute cache write $3.75, cache read $0.30 per million tokens
    expected = (1000 * 3 + 2000 * 15 + 3000 * 3.75 + 4000 * 0.30) / 1e6
    assert usage.cost_usd == pytest.approx(expected)
    assert usage.cost_known
    assert budget.totals().cost_usd == pytest.approx(expected)

    [sent] = server.received(fls.MESSAGES)
    # SDK 2.x sends the key as a bearer token (older ones used x-api-key)
    assert "sk-test-anthropic" in sent.headers.get("x-api-key", "") + sent.headers.get("authorization", "")
    assert sent.body["model"] == "claude-sonnet-4-6"
    assert sent.body["max_tokens"] == 1234
    system = sent.body["system"]
    assert [block["cache_control"] for block in system] == [{"type": "ephemeral"}, {"type": "ephemeral"}]
    assert "class ModelNew(nn.Module)" in system[0]["text"] and "@triton.jit" in system[0]["text"]
    assert "Evidence: 3 wins" in system[1]["text"]
    [message] = sent.body["messages"]
    assert message["role"] == "user"
    assert "kernelbench/level1/19_ReLU" in message["content"] and "NameError: tl" in message["content"]
    assert MEMORY.strip()[:50] not in message["content"]  # the memory is only in the cached block


def test_anthropic_without_memory_sends_one_system_block(server: fls.FakeLLMServer) -> None:
    server.enqueue(fls.MESSAGES, fls.anthropic_message(REPLY))
    gen = make_generator("anthropic", env=ANTHROPIC_ENV, base_url=server.url)
    gen.generate(make_request().model_copy(update={"memory_context": ""}))
    [sent] = server.received(fls.MESSAGES)
    assert len(sent.body["system"]) == 1
    assert sent.body["model"] == "claude-sonnet-4-6"  # the default model


def test_anthropic_retries_529_and_429_then_succeeds(server: fls.FakeLLMServer) -> None:
    server.enqueue(fls.MESSAGES, fls.Scripted(529, fls.error_body("overloaded_error", "Overloaded")))
    server.enqueue(
        fls.MESSAGES, fls.Scripted(429, fls.error_body("rate_limit_error", "slow down"), {"retry-after": "7"})
    )
    server.enqueue(fls.MESSAGES, fls.anthropic_message(REPLY))
    retry, sleeper = fast_retry(attempts=4)
    gen = make_generator("anthropic", env=ANTHROPIC_ENV, base_url=server.url, retry=retry)
    reply = gen.generate(make_request())
    assert reply.source == CODE
    assert len(server.received(fls.MESSAGES)) == 3  # the SDK's own retries are off: every attempt is ours
    assert len(sleeper.delays) == 2
    assert 0.0 <= sleeper.delays[0] <= 0.5  # full jitter on the first backoff
    assert sleeper.delays[1] == 7.0  # the server's retry-after is honoured


def test_anthropic_gives_up_after_the_attempt_limit(server: fls.FakeLLMServer) -> None:
    for _ in range(5):
        server.enqueue(fls.MESSAGES, fls.Scripted(529, fls.error_body("overloaded_error", "Overloaded")))
    retry, sleeper = fast_retry(attempts=3)
    budget = BudgetTracker()
    gen = make_generator("anthropic", env=ANTHROPIC_ENV, base_url=server.url, retry=retry, budget=budget)
    with pytest.raises(BackendError, match="gave up after 3 attempts.*529"):
        gen.generate(make_request())
    assert len(server.received(fls.MESSAGES)) == 3
    assert len(sleeper.delays) == 2
    assert budget.totals().calls == 0  # failed attempts cost nothing


def test_anthropic_permanent_error_is_not_retried(server: fls.FakeLLMServer) -> None:
    server.enqueue(
        fls.MESSAGES, fls.Scripted(401, fls.error_body("authentication_error", "invalid x-api-key"))
    )
    retry, sleeper = fast_retry()
    gen = make_generator("anthropic", env=ANTHROPIC_ENV, base_url=server.url, retry=retry)
    with pytest.raises(BackendError, match="HTTP 401: invalid x-api-key"):
        gen.generate(make_request())
    assert len(server.received(fls.MESSAGES)) == 1
    assert sleeper.delays == []


def test_anthropic_connection_refused_is_retried_then_fails() -> None:
    with fls.FakeLLMServer() as s:
        dead_url = s.url  # the port is closed once the server stops
    retry, sleeper = fast_retry(attempts=2)
    gen = make_generator("anthropic", env=ANTHROPIC_ENV, base_url=dead_url, retry=retry, timeout_s=5)
    with pytest.raises(BackendError, match="gave up after 2 attempts: anthropic: connection failed"):
        gen.generate(make_request())
    assert len(sleeper.delays) == 1


def test_anthropic_read_timeout_fails_the_step_and_is_not_sent_again(server: fls.FakeLLMServer) -> None:
    """A read timeout means the prompt reached the model: re-sending it would bill it again, so the step fails
    (`StepInfraError`: the loop records infra_error and goes on) after one request."""
    server.enqueue(fls.MESSAGES, fls.Scripted(200, {}, delay_s=2.0))
    server.enqueue(fls.MESSAGES, fls.anthropic_message(REPLY))
    retry, sleeper = fast_retry(attempts=4)
    gen = make_generator("anthropic", env=ANTHROPIC_ENV, base_url=server.url, retry=retry, timeout_s=0.3)
    with pytest.raises(StepInfraError, match=r"^anthropic: no answer within 0.3 s \(--llm-timeout\)"):
        gen.generate(make_request())
    assert len(server.received(fls.MESSAGES)) == 1 and sleeper.delays == []


def test_openai_read_timeout_is_not_sent_again(server: fls.FakeLLMServer) -> None:
    server.enqueue(fls.CHAT, fls.Scripted(200, {}, delay_s=2.0))
    retry, sleeper = fast_retry(attempts=4)
    gen = make_generator(
        "openai:deepseek-chat", env=OPENAI_ENV, base_url=server.url + "/v1", retry=retry, timeout_s=0.3
    )
    with pytest.raises(StepInfraError, match="no answer within 0.3 s"):
        gen.generate(make_request())
    assert len(server.received(fls.CHAT)) == 1 and sleeper.delays == []


def test_retries_are_reported_to_the_progress_and_the_reply_says_how_many_calls(
    server: fls.FakeLLMServer,
) -> None:
    server.enqueue(fls.MESSAGES, fls.Scripted(529, fls.error_body("overloaded_error", "Overloaded")))
    server.enqueue(fls.MESSAGES, fls.anthropic_message(REPLY, stop_reason="max_tokens"))
    told: list[str] = []
    retry = RetryPolicy(max_attempts=3, base_delay_s=0.0, sleep=lambda s: None, notify=told.append)
    reply = make_generator("anthropic", env=ANTHROPIC_ENV, base_url=server.url, retry=retry).generate(
        make_request()
    )
    assert len(told) == 1 and told[0].startswith("anthropic:claude-sonnet-4-6: attempt 1/3 failed (")
    assert "529" in told[0]
    assert reply.attempts == 2 and reply.latency_s is not None and reply.latency_s > 0
    # the code parses, but the reply hit the token limit: flagged all the same
    assert reply.source == CODE and reply.truncated and reply.finish_reason == "max_tokens"
    assert reply.extraction.startswith("ok: fenced python")


def test_anthropic_reply_without_code_is_an_error_reply_not_an_exception(server: fls.FakeLLMServer) -> None:
    server.enqueue(
        fls.MESSAGES, fls.anthropic_message("I think we should use shared memory.", stop_reason="max_tokens")
    )
    gen = make_generator("anthropic", env=ANTHROPIC_ENV, base_url=server.url)
    reply = gen.generate(make_request())
    assert reply.source is None
    assert reply.error is not None and "no code" in reply.error and "max_tokens" in reply.error
    assert reply.usage.cost_usd > 0  # a useless reply still cost money


def test_anthropic_missing_key_names_the_variable() -> None:
    with pytest.raises(
        BackendError, match="^ANTHROPIC_API_KEY is not set: export it or use --backend rules$"
    ):
        make_generator("anthropic", env={})


def test_budget_is_checked_before_each_call(server: fls.FakeLLMServer) -> None:
    server.enqueue(fls.MESSAGES, fls.anthropic_message(REPLY, input_tokens=1_000_000, output_tokens=0))
    budget = BudgetTracker(limit_usd=2.0)
    gen = make_generator("anthropic:claude-sonnet-4-6", env=ANTHROPIC_ENV, base_url=server.url, budget=budget)
    first = gen.generate(make_request(0))  # under budget when it starts; costs $3
    assert first.usage.cost_usd == pytest.approx(3.0)
    with pytest.raises(BudgetExceeded, match=r"budget of \$2.00 spent \(\$3.0000 used\)"):
        gen.generate(make_request(1))
    assert len(server.received(fls.MESSAGES)) == 1  # the second call never started


def test_unpriced_model_is_refused_under_a_budget_and_zero_cost_without(server: fls.FakeLLMServer) -> None:
    assert lookup_price("claude-experimental-x") is None
    with pytest.raises(BackendError, match="no price known for model 'claude-experimental-x'"):
        make_generator(
            "anthropic:claude-experimental-x",
            env=ANTHROPIC_ENV,
            base_url=server.url,
            budget=BudgetTracker(1.0),
        )
    server.enqueue(fls.MESSAGES, fls.anthropic_message(REPLY))
    gen = make_generator("anthropic:claude-experimental-x", env=ANTHROPIC_ENV, base_url=server.url)
    reply = gen.generate(make_request())
    assert reply.usage.cost_usd == 0.0 and not reply.usage.cost_known


# ------------------------------------------------------------------------------------------------ openai
def test_openai_deepseek_reasoning_is_never_parsed_as_code(server: fls.FakeLLMServer) -> None:
    decoy = "```python\nclass ModelNew: pass  # from the reasoning, must not be used\n```"
    server.enqueue(
        fls.CHAT,
        fls.openai_completion(
            REPLY,
            reasoning_content=decoy,
            prompt_tokens=1_000_000,
            completion_tokens=1_000_000,
            cached_tokens=400_000,
        ),
    )
    gen = make_generator(
        "openai:deepseek-reasoner", env=OPENAI_ENV, base_url=server.url + "/v1", max_tokens=777
    )
    reply = gen.generate(make_request())
    assert gen.name == "openai:deepseek-reasoner"
    assert reply.source == CODE
    assert (reply.usage.input_tokens, reply.usage.cache_read_tokens, reply.usage.output_tokens) == (
        600_000,
        400_000,
        1_000_000,
    )
    assert reply.usage.cost_usd == pytest.approx(0.6 * 0.55 + 0.4 * 0.14 + 2.19)
    [sent] = server.received(fls.CHAT)
    assert sent.headers["authorization"] == "Bearer sk-test-openai"
    assert sent.body["model"] == "deepseek-reasoner"
    assert sent.body["max_tokens"] == 777
    system, user = sent.body["messages"]
    assert system["role"] == "system" and "class ModelNew(nn.Module)" in system["content"]
    assert system["content"].index("ModelNew") < system["content"].index(
        "Evidence: 3 wins"
    )  # stable prefix first
    assert user["role"] == "user" and "19_ReLU" in user["content"]


def test_openai_think_tags_in_content_are_stripped(server: fls.FakeLLMServer) -> None:
    server.enqueue(
        fls.CHAT, fls.openai_completion("<think>```python\nclass ModelNew: x(\n```</think>\n" + REPLY)
    )
    gen = make_generator("openai:deepseek-reasoner", env=OPENAI_ENV, base_url=server.url + "/v1")
    assert gen.generate(make_request()).source == CODE


def test_openai_reasoning_only_reply_is_an_error_reply(server: fls.FakeLLMServer) -> None:
    server.enqueue(fls.CHAT, fls.openai_completion(None, reasoning_content="x" * 500, finish_reason="length"))
    gen = make_generator("openai:deepseek-reasoner", env=OPENAI_ENV, base_url=server.url + "/v1")
    reply = gen.generate(make_request())
    assert reply.source is None
    assert (
        reply.error is not None
        and "500 characters of reasoning" in reply.error
        and "max_tokens" in reply.error
    )


def test_openai_retries_then_succeeds_and_unknown_model_costs_zero(server: fls.FakeLLMServer) -> None:
    server.enqueue(fls.CHAT, fls.Scripted(503, {"error": {"message": "busy", "type": "server_error"}}))
    server.enqueue(
        fls.CHAT,
        fls.Scripted(429, {"error": {"message": "rate", "type": "rate_limit"}}, {"retry-after-ms": "250"}),
    )
    server.enqueue(fls.CHAT, fls.openai_completion(REPLY, model="Qwen/Qwen3-32B"))
    retry, sleeper = fast_retry(attempts=3)
    gen = make_generator("openai:Qwen/Qwen3-32B", env=OPENAI_ENV, base_url=server.url + "/v1", retry=retry)
    reply = gen.generate(make_request())
    assert reply.source == CODE
    assert len(server.received(fls.CHAT)) == 3
    assert sleeper.delays[1] == pytest.approx(0.25)
    assert reply.usage.cost_usd == 0.0 and not reply.usage.cost_known


def test_openai_missing_key_and_missing_model() -> None:
    with pytest.raises(BackendError, match="^OPENAI_API_KEY is not set"):
        make_generator("openai:deepseek-reasoner", env={})
    with pytest.raises(BackendError, match="^DEEPSEEK_API_KEY is not set"):
        make_generator("openai:deepseek-reasoner", env=OPENAI_ENV, api_key_env="DEEPSEEK_API_KEY")
    with pytest.raises(BackendError, match="needs a model"):
        make_generator("openai", env=OPENAI_ENV)


def test_openai_base_url_from_env(server: fls.FakeLLMServer) -> None:
    server.enqueue(fls.CHAT, fls.openai_completion(REPLY))
    env = {**OPENAI_ENV, "OPENAI_BASE_URL": server.url + "/v1"}
    make_generator("openai:deepseek-chat", env=env).generate(make_request())
    assert len(server.received(fls.CHAT)) == 1
