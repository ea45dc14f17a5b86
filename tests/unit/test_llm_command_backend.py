"""`--backend command:CMD` with small shell scripts: what the command reads, what it answers, how it fails."""

from __future__ import annotations

import json
import os
import runpy
import time
from pathlib import Path

import pytest

from htam_graph.errors import BackendError, StepInfraError
from htam_graph.llm import BudgetTracker, make_generator
from htam_graph.model import GenerationRequest

make_request = runpy.run_path(str(Path(__file__).with_name("test_llm_replay_registry.py")))["make_request"]
CODE = "import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"


def script(tmp_path: Path, body: str, name: str = "model.sh") -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(0o755)
    return path


def request() -> GenerationRequest:
    req: GenerationRequest = make_request(step=3)
    return req.model_copy(update={"memory_context": "Evidence: 2 wins."})


def test_the_request_goes_to_stdin_as_delimited_text_and_stdout_is_the_reply(tmp_path: Path) -> None:
    seen = tmp_path / "stdin.txt"
    reply = f"STRATEGY: vec\n```python\n{CODE}```\n"
    cmd = script(tmp_path, f'cat > {seen}\necho "step=$HTAM_STEP task=$HTAM_TASK_KEY" > {tmp_path}/env\n'
                           f"cat <<'EOF'\n{reply}EOF\n")  # fmt: skip
    gen = make_generator(f"command:{cmd} --flag 'two words'", env=dict(os.environ))
    answer = gen.generate(request())
    assert answer.source == CODE and answer.strategy_key == "vec" and answer.raw_text == reply
    assert answer.model == f"{cmd} --flag 'two words'" and not answer.usage.cost_known
    assert answer.latency_s is not None and answer.attempts == 1 and not answer.infra_error
    text = seen.read_text(encoding="utf-8")
    assert text.startswith("<system>\n") and "\n</system>\n\n<memory>\n" in text
    assert "Evidence: 2 wins." in text.split("<memory>")[1].split("</memory>")[0]
    assert "<user>\n" in text and "kb/level1/19_ReLU" in text.split("<user>")[1]
    assert (tmp_path / "env").read_text().strip() == "step=3 task=kb/level1/19_ReLU"


def test_command_json_sends_one_json_object(tmp_path: Path) -> None:
    seen = tmp_path / "stdin.json"
    cmd = script(tmp_path, f"cat > {seen}\necho no code\n")
    gen = make_generator(f"command:{cmd}", env=dict(os.environ), command_json=True, max_tokens=123)
    answer = gen.generate(request())
    assert answer.source is None and answer.error is not None and "no code" in answer.error
    sent = json.loads(seen.read_text(encoding="utf-8"))
    assert sent["memory"].endswith("Evidence: 2 wins.") and sent["task_key"] == "kb/level1/19_ReLU"
    assert (sent["step"], sent["max_tokens"], sent["temperature"]) == (3, 123, None)
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]
    assert sent["messages"][0]["content"].endswith("Evidence: 2 wins.")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("echo oops >&2\nexit 3\n", r"exited with status 3: oops$"),
        ("cat > /dev/null\n", "printed nothing$"),
        ("printf '  \\n\\n'\n", "printed nothing$"),
    ],
)
def test_a_failing_or_silent_command_fails_the_step_only(tmp_path: Path, body: str, message: str) -> None:
    gen = make_generator(f"command:{script(tmp_path, body)}", env=dict(os.environ))
    with pytest.raises(StepInfraError, match=message):
        gen.generate(request())


def test_a_command_past_the_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    marker = tmp_path / "child-alive"
    body = f"(sleep 30; touch {marker}) &\nsleep 30\necho late\n"
    gen = make_generator(f"command:{script(tmp_path, body)}", env=dict(os.environ), timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(StepInfraError, match=r"no reply within 0.5 s \(--llm-timeout\); killed$"):
        gen.generate(request())
    assert time.monotonic() - started < 10
    time.sleep(0.3)
    groups = [p for p in Path("/proc").glob("[0-9]*") if _cmdline(p).endswith(f"touch {marker}")]
    assert groups == [] and not marker.exists()


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def test_bad_commands_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="^command not found: no-such-model-cli "):
        make_generator("command:no-such-model-cli -p", env={})
    with pytest.raises(BackendError, match="needs a command"):
        make_generator("command:", env={})
    with pytest.raises(BackendError, match="cannot parse the command"):
        make_generator("command:claude 'unclosed", env={})
    with pytest.raises(BackendError, match="cost is unknown, so a dollar budget cannot be enforced"):
        make_generator(f"command:{script(tmp_path, 'echo x')}", env={}, budget=BudgetTracker(1.0))
