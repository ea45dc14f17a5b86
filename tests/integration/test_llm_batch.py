"""The batch backends against the local fake server, which speaks both batch APIs with their documented shapes:
every awaited request of a folder goes out as one job, is polled, and each result becomes the step's reply (or
an error for a refused request); then `run` and `bench` resume their runs with those replies."""

from __future__ import annotations

import json
import runpy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from htam_graph.cli.main import _register, cli
from htam_graph.errors import BackendError
from htam_graph.llm.batch import make_courier
from htam_graph.llm.pending import read_pending, read_reply, write_pending
from htam_graph.model import DirectionScore
from htam_graph.runtypes import PendingStep
from htam_graph.settings import Settings
from htam_graph.store.embedded import ServerInfo
from htam_graph.store.falkordb_store import FalkorDBStore

load_sibling = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]
fls = load_sibling("fake_llm_server")
make_request = runpy.run_path(str(Path(__file__).with_name("test_llm_backends.py")))["make_request"]
SUITE = Path(__file__).resolve().parents[1] / "data" / "bench_suite" / "kernelbench"
ENV = {"ANTHROPIC_API_KEY": "sk-ant-test", "OPENAI_API_KEY": "sk-oai-test"}


@pytest.fixture
def server() -> Iterator[Any]:
    with fls.FakeLLMServer() as s:
        yield s


def pending_runs(root: Path, steps: list[int]) -> list[Path]:
    """One run folder per step number, each awaiting the reply to that step."""
    folders = []
    for n, step in enumerate(steps):
        folder = root / f"run{n}"
        request = make_request(step).model_copy(update={"memory_context": "Evidence: 1 win."})
        pending = PendingStep(
            step=step, request=request, direction=DirectionScore(key="memory_access", score=0.0, support=0),
            rng_state=__import__("random").Random(n).getstate(),
            prompt={"system": f"system {n}", "memory": "memory block", "user": f"user {n}"},
        )  # fmt: skip
        write_pending(folder / "pending", pending, run_key=f"run-{n}", task_key=request.task.key, config={})
        folders.append(folder)
    return folders


def refuse_the_second(cid: str, params: dict[str, Any]) -> str | None:
    return None if cid == "htam-00002" else f"STRATEGY: none\nreply to {cid}"


def test_anthropic_message_batches_one_job_polled_and_saved(server: Any, tmp_path: Path) -> None:
    folders = pending_runs(tmp_path / "runs", [1, 3, 2])
    server.batch_answer = refuse_the_second
    courier = make_courier("batch:anthropic:claude-sonnet-4-6", env=ENV, base_url=server.url, max_tokens=321)
    told: list[str] = []
    assert courier.deliver(tmp_path / "runs", tmp_path / "batch.json", told.append)
    [sent] = server.received(fls.ANTHROPIC_BATCHES)
    assert "sk-ant-test" in sent.headers.get("x-api-key", "") + sent.headers.get("authorization", "")
    assert [r["custom_id"] for r in sent.body["requests"]] == ["htam-00001", "htam-00002", "htam-00003"]
    params = sent.body["requests"][0]["params"]
    assert params["model"] == "claude-sonnet-4-6" and params["max_tokens"] == 321
    assert [b["text"] for b in params["system"]] == ["system 0", "memory block"]
    assert all(b["cache_control"] == {"type": "ephemeral"} for b in params["system"])
    assert params["messages"] == [{"role": "user", "content": "user 0"}]
    assert len(server.batches) == 1 and not (tmp_path / "batch.json").exists()
    first = read_reply(folders[0] / "pending", 1)
    assert first is not None and first.text == "STRATEGY: none\nreply to htam-00001"
    assert first.model == "claude-sonnet-4-6" and first.finish_reason == "end_turn"
    assert first.usage is not None and first.usage.cost_usd == pytest.approx(
        (100 * 3 + 50 * 15) / 2e6
    )  # half
    refused = read_reply(folders[1] / "pending", 3)
    assert refused is not None and refused.text is None and "errored: fake: refused" in (refused.error or "")
    assert told[0].startswith("batch msgbatch_0001: 3 request(s) sent to anthropic")
    assert told[-1] == "batch msgbatch_0001: 2 replies saved, 1 failed"
    assert not courier.deliver(
        tmp_path / "runs", tmp_path / "batch.json", told.append
    )  # nothing left to send


def test_openai_batch_api_upload_create_poll_and_output_file(server: Any, tmp_path: Path) -> None:
    folders = pending_runs(tmp_path / "runs", [2, 5])
    server.batch_answer = refuse_the_second
    courier = make_courier("batch:openai:deepseek-chat", env=ENV, base_url=server.url + "/v1")
    assert courier.deliver(tmp_path / "runs", tmp_path / "batch.json", lambda message: None)
    [upload] = server.received(fls.OPENAI_FILES)
    assert upload.body == {"purpose": "batch"} and upload.headers["authorization"] == "Bearer sk-oai-test"
    [create] = server.received(fls.OPENAI_BATCHES)
    assert create.body == {
        "input_file_id": "file-0001",
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
    }
    lines = [json.loads(x) for x in server.files["file-0001"].decode().splitlines()]
    assert [(x["custom_id"], x["method"], x["url"]) for x in lines] == [
        ("htam-00001", "POST", "/v1/chat/completions"), ("htam-00002", "POST", "/v1/chat/completions"),
    ]  # fmt: skip
    assert lines[0]["body"]["messages"][0] == {"role": "system", "content": "system 0\n\nmemory block"}
    ok = read_reply(folders[0] / "pending", 2)
    assert ok is not None and ok.text == "STRATEGY: none\nreply to htam-00001" and ok.finish_reason == "stop"
    assert ok.usage is not None and ok.usage.cost_usd == pytest.approx((100 * 0.27 + 50 * 1.10) / 2e6)
    refused = read_reply(folders[1] / "pending", 5)
    assert refused is not None and "HTTP 400: fake: refused" in (refused.error or "")


def test_a_job_still_running_is_collected_later_not_sent_again(server: Any, tmp_path: Path) -> None:
    folders = pending_runs(tmp_path / "runs", [1])
    server.polls_before_end = 10**6
    courier = make_courier("batch:anthropic", env=ENV, base_url=server.url, wait_s=0.2)
    told: list[str] = []
    assert not courier.deliver(tmp_path / "runs", tmp_path / "batch.json", told.append)
    assert "still running after 0.2 s (--llm-timeout): run the same command again" in told[-1]
    assert json.loads((tmp_path / "batch.json").read_text())["batch_id"] == "msgbatch_0001"
    assert read_reply(folders[0] / "pending", 1) is None
    server.polls_before_end = 0
    assert courier.deliver(tmp_path / "runs", tmp_path / "batch.json", told.append)
    assert len(server.batches) == 1 and read_reply(folders[0] / "pending", 1) is not None
    assert read_pending(folders[0] / "pending", 1) is not None  # the request stays until its step is done


def test_bad_batch_specs_and_missing_keys() -> None:
    with pytest.raises(BackendError, match="batch:anthropic\\[:MODEL\\] or batch:openai:MODEL"):
        make_courier("batch:gemini", env=ENV)
    with pytest.raises(BackendError, match="^ANTHROPIC_API_KEY is not set"):
        make_courier("batch:anthropic", env={})


# ------------------------------------------------------------------------------------------ through the CLI
@pytest.fixture
def settings(embedded_server: ServerInfo) -> Iterator[Settings]:
    s = Settings(htam_home=embedded_server.home, graph_name=f"batch_{uuid.uuid4().hex[:12]}")
    yield s
    store = FalkorDBStore(embedded_server.socket_path, s.graph_name)
    store.delete_graph()
    store.close()


def invoke(settings: Settings, args: list[str], **env: str) -> tuple[int, str, str]:
    _register()
    base = {"HTAM_HOME": str(settings.htam_home), "HTAM_GRAPH_NAME": settings.graph_name, "NEO4J_URI": ""}
    res = CliRunner().invoke(cli, args, env={**base, **ENV, **env}, catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


def test_run_with_anthropic_batches_resumes_after_each_job(
    server: Any, settings: Settings, tmp_path: Path
) -> None:
    server.batch_answer = lambda cid, params: "STRATEGY: none\nno code in this batch reply"
    out = tmp_path / "out"
    args = ["run", str(SUITE / "level1" / "20_LeakyReLU.py"), "--backend", "batch:anthropic", "--device", "cpu",
            "--shape", "smoke", "--steps", "2", "--out", str(out), "--json"]  # fmt: skip
    code, stdout, stderr = invoke(settings, args, ANTHROPIC_BASE_URL=server.url)
    assert code == 0, stderr
    assert json.loads(stdout)["stopped_reason"] == "2 steps done"
    assert len(server.batches) == 2  # one job per awaited step of this single run
    rows = json.loads((out / "trajectory.json").read_text(encoding="utf-8"))
    assert [r["error_kind"] for r in rows] == ["no_code", "no_code"]
    assert rows[0]["generation"]["model"] == "claude-sonnet-4-6"
    assert rows[0]["usage"]["cost_usd"] == pytest.approx((100 * 3 + 50 * 15) / 2e6)


def test_bench_with_openai_batches_sends_every_run_in_one_job(
    server: Any, settings: Settings, tmp_path: Path
) -> None:
    server.batch_answer = lambda cid, params: "STRATEGY: none\nno code"
    out = tmp_path / "bench"
    args = ["--home", str(settings.htam_home), "bench", "--tasks", str(SUITE / "level1" / "20_LeakyReLU.py"),
            str(SUITE / "level1" / "22_Tanh.py"), "--backend", "batch:openai:deepseek-chat", "--steps", "1",
            "--device", "cpu", "--shape", "smoke", "--workers", "2", "--out", str(out), "--json"]  # fmt: skip
    code, stdout, stderr = invoke(settings, args, OPENAI_BASE_URL=server.url + "/v1")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["statuses"] == {"done": 2} and summary["awaiting_reply"] == 0
    [batch] = server.batches.values()
    assert len(batch["requests"]) == 2  # both runs' requests in one job
