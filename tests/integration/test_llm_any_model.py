"""Any model or agent as the generator, through `htam-graph run`: `llm:MODEL` (a stub model registered through
the `llm` library's real plugin hook), `command:CMD` (shell scripts), `--record` to a replay bank, and the bad
inputs that must end in one line (exit 1 where the run cannot go on), never a traceback."""

from __future__ import annotations

import json
import runpy
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner

from htam_graph import memory
from htam_graph.cli.main import _register, cli
from htam_graph.settings import Settings
from htam_graph.store import store_session

load_sibling = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]
SUITE = Path(__file__).resolve().parents[1] / "data" / "bench_suite" / "kernelbench"
TASK = str(SUITE / "level1" / "20_LeakyReLU.py")
KERNEL = (Path(__file__).resolve().parents[1] / "data" / "candidates" / "triton_leaky_relu.py").read_text()


@pytest.fixture
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The stub plugin registered with `llm`'s plugin manager (as `llm` registers an installed plugin), with
    `llm`'s user folder (keys, aliases) in a temporary directory."""
    import llm

    monkeypatch.setenv("LLM_USER_PATH", str(tmp_path / "llm-user"))
    monkeypatch.delenv("HTAM_STUB_KEY", raising=False)
    module = load_sibling("llm_stub_plugin")
    llm.plugins.pm.register(module, name="htam-test-stub")
    module.SEEN.clear()
    yield module
    llm.plugins.pm.unregister(name="htam-test-stub")


def invoke(settings: Settings, args: list[str], **env: str) -> tuple[int, str, str]:
    _register()
    base = {"HTAM_HOME": str(settings.htam_home), "HTAM_GRAPH_NAME": settings.graph_name, "NEO4J_URI": ""}
    res = CliRunner().invoke(cli, args, env={**base, **env}, catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


def run_args(backend: str, out: Path, steps: int = 1, *extra: str) -> list[str]:
    return [
        "run", TASK, "--backend", backend, "--device", "cpu", "--shape", "smoke", "--steps", str(steps),
        "--out", str(out), "--json", *extra,
    ]  # fmt: skip


def trajectory(out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((out / "trajectory.json").read_text(encoding="utf-8"))
    return rows


def one_line_error(code: int, stderr: str, fragment: str) -> None:
    assert code == 1 and "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and fragment in last, stderr


def test_llm_stub_model_end_to_end(stub: ModuleType, htam_settings: Settings, tmp_path: Path) -> None:
    """The stub's reply holds a correct kernel but says it hit the token limit: evaluated, and flagged."""
    stub.REPLIES[:] = [f"STRATEGY: none\n```python\n{KERNEL}\n```\n"]
    stub.FINISH[:] = ["length"]
    out = tmp_path / "out"
    args = run_args("llm:stub", out, 1, "--max-tokens", "999", "--temperature", "0.2", "--price", "1,2")
    code, stdout, stderr = invoke(htam_settings, args)
    assert code == 0, stderr
    [row] = trajectory(out)
    assert row["status"] == "correct" and row["eval"]["correct"]
    generation = row["generation"]
    assert (
        generation["model"] == "stub-model"
        and generation["truncated"]
        and generation["finish_reason"] == "length"
    )
    assert generation["chosen"] == "none" and generation["extraction"].startswith("ok: fenced python")
    assert row["usage"]["output_tokens"] > 0 and row["usage"]["cost_known"]  # priced with --price
    assert stub.SEEN[0]["options"] == {"max_tokens": 999, "temperature": 0.2}
    assert "ModelNew" in stub.SEEN[0]["system"] and "20_LeakyReLU" in stub.SEEN[0]["prompt"]
    assert (out / "candidates" / "step_1.reply.md").read_text(encoding="utf-8") == stub.REPLIES[0]
    assert json.loads(stdout)["backend"] == "llm:stub"


def test_llm_unknown_model_and_missing_key_are_one_line(
    stub: ModuleType, htam_settings: Settings, tmp_path: Path
) -> None:
    code, _, stderr = invoke(htam_settings, run_args("llm:no-such-model", tmp_path / "a"))
    one_line_error(code, stderr, "unknown llm model 'no-such-model'")
    code, _, stderr = invoke(htam_settings, run_args("llm:stub-keyed", tmp_path / "b"))
    one_line_error(code, stderr, "llm model stub-keyed: No key found")
    stub.REPLIES[:] = ["no code"]
    code, _, stderr = invoke(htam_settings, run_args("llm:stub-keyed", tmp_path / "c"), HTAM_STUB_KEY="k")
    assert code == 0, stderr


def test_command_replies_garbage_and_record_replays_them(htam_settings: Settings, tmp_path: Path) -> None:
    """A garbage reply is the model's failure (no_code, evidence), and the run goes on; `--record` writes the
    replies as a replay bank that reproduces the run's replies."""
    model = tmp_path / "model.sh"
    model.write_text(
        "#!/bin/sh\ncat > /dev/null\necho 'STRATEGY: no.such.key'\necho '```python'\necho 'class ModelNew(nn.Module:'\n"
    )
    model.chmod(0o755)
    bank = tmp_path / "bank.jsonl"
    code, stdout, stderr = invoke(
        htam_settings, run_args(f"command:{model}", tmp_path / "a", 2, "--record", str(bank))
    )
    assert code == 0, stderr
    rows = trajectory(tmp_path / "a")
    assert [r["error_kind"] for r in rows] == ["no_code", "no_code"]
    assert all("does not parse" in r["error_excerpt"] and "not closed" in r["error_excerpt"] for r in rows)
    assert [r["generation"]["chosen"] for r in rows] == ["unknown", "unknown"] and rows[0]["local"] is None
    records = [json.loads(line) for line in bank.read_text(encoding="utf-8").splitlines()]
    assert [r["match"]["step"] for r in records] == [1, 2] and records[0]["model"] == str(model)
    code, _, stderr = invoke(htam_settings, run_args(f"replay:{bank}", tmp_path / "b", 2))
    assert code == 0, stderr
    again = trajectory(tmp_path / "b")
    assert [r["error_excerpt"] for r in again] == [r["error_excerpt"] for r in rows]


def test_a_command_failing_every_step_stops_the_run_with_no_evidence(
    htam_settings: Settings, tmp_path: Path
) -> None:
    model = tmp_path / "broken.sh"
    model.write_text("#!/bin/sh\necho 'model crashed' >&2\nexit 2\n")
    model.chmod(0o755)
    code, _, stderr = invoke(htam_settings, run_args(f"command:{model}", tmp_path / "out", 5))
    one_line_error(code, stderr, "3 steps in a row got no reply (last: command ")
    assert "exited with status 2: model crashed" in stderr.strip().splitlines()[-1]
    rows = trajectory(tmp_path / "out")
    assert [r["error_kind"] for r in rows] == ["infra_error"] * 3
    assert all(r["generation"]["infra_error"] for r in rows)
    with store_session(htam_settings) as store:
        locals_ = [c for g in memory.directions(store) for c in memory.locals_for(store, g.key)]
    assert sum(c.attempts for c in locals_) == 0  # recorded, but no strategy's evidence


def test_command_not_found_is_one_line(htam_settings: Settings, tmp_path: Path) -> None:
    code, _, stderr = invoke(htam_settings, run_args("command:no-such-agent -p", tmp_path / "out"))
    one_line_error(code, stderr, "command not found: no-such-agent")


def test_llm_timeouts_and_plugin_failures_fail_the_step_only(stub: ModuleType) -> None:
    from htam_graph.errors import StepInfraError
    from htam_graph.llm import make_generator

    request = runpy.run_path(str(Path(__file__).with_name("test_llm_backends.py")))["make_request"]()
    stub.SLOW_S = 3.0
    slow = make_generator("llm:stub-slow", env={}, timeout_s=0.3)
    with pytest.raises(StepInfraError, match=r"^llm:stub-slow: no answer within 0.3 s \(--llm-timeout\)"):
        slow.generate(request)
    broken = make_generator("llm:stub-broken", env={})
    with pytest.raises(StepInfraError, match="^llm:stub-broken: ConnectionError: the stub service is down$"):
        broken.generate(request)
