"""Any program as the model (`--backend command:"CMD ..."`): the request on its stdin, the reply on its
stdout.

The request is sent as text, its parts delimited by `<system>`, `<memory>` and `<user>` tags (see
`pending.prompt_as_text`), or as one JSON object with `--command-json`:

    {"system": "...", "memory": "...", "user": "...",
     "messages": [{"role": "system", "content": system + memory}, {"role": "user", "content": user}],
     "task_key": "...", "step": 3, "max_tokens": 16384, "temperature": null}

Whatever the command prints on stdout is the reply (read exactly like a model's answer). The command runs in
its own session with `HTAM_TASK_KEY` and `HTAM_STEP` set; past the timeout its whole process group is killed.
A timeout, a non-zero exit or an empty output fails that step only (`StepInfraError`: recorded as
`infra_error`, no evidence); the run goes on. Its cost is unknown (`cost_known=False`).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from htam_graph.errors import BackendError, StepInfraError
from htam_graph.llm.generator import Completion, LLMGenerator
from htam_graph.llm.pending import prompt_as_text
from htam_graph.llm.prompts import RenderedPrompt
from htam_graph.model import GenerationReply, GenerationRequest, Usage

_STDERR_TAIL = 300


@dataclass(frozen=True)
class CommandRequest:
    """What the command is told beyond the prompt (also given to it as environment variables)."""

    task_key: str = ""
    step: int = 0


def parse_command(text: str | None) -> list[str]:
    """The argument vector of `command:CMD`; `BackendError` when it is empty, unparsable or not found."""
    if not text or not text.strip():
        raise BackendError('the command backend needs a command: --backend command:"claude -p"')
    try:
        argv = shlex.split(text)
    except ValueError as e:
        raise BackendError(f"cannot parse the command {text!r}: {e}") from e
    if shutil.which(argv[0]) is None:
        raise BackendError(f"command not found: {argv[0]} (from --backend command:{text})")
    return argv


class CommandChatClient:
    """Runs the command once per request. `model` is the command line as given."""

    provider = "command"

    def __init__(
        self,
        argv: list[str],
        *,
        timeout_s: float = 600.0,
        as_json: bool = False,
        max_tokens: int = 16384,
        temperature: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.argv = argv
        self.model = shlex.join(argv)
        self.timeout_s = timeout_s
        self.as_json = as_json
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.env = dict(os.environ if env is None else env)
        self.context = CommandRequest()

    def payload(self, prompt: RenderedPrompt) -> str:
        """What the command reads on stdin for `prompt`."""
        if not self.as_json:
            return prompt_as_text(prompt)
        system = prompt.system + ("\n\n" + prompt.memory if prompt.memory else "")
        return json.dumps(
            {
                "system": prompt.system,
                "memory": prompt.memory,
                "user": prompt.user,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt.user}],
                "task_key": self.context.task_key,
                "step": self.context.step,
                "max_tokens": self.max_tokens,
                "temperature": self.temperature,
            }
        )

    def complete(self, prompt: RenderedPrompt) -> Completion:
        """Run the command; `StepInfraError` for a timeout, a non-zero exit or an empty reply."""
        env = {**self.env, "HTAM_TASK_KEY": self.context.task_key, "HTAM_STEP": str(self.context.step)}
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,  # its own process group, killed whole on timeout
            )
        except OSError as e:
            raise BackendError(f"command {self.argv[0]} cannot be started: {e.strerror or e}") from e
        try:
            out, err = proc.communicate(self.payload(prompt).encode("utf-8"), timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            raise StepInfraError(
                f"command {self.argv[0]}: no reply within {self.timeout_s:g} s (--llm-timeout); killed"
            ) from None
        text = out.decode("utf-8", errors="replace")
        if proc.returncode != 0:
            raise StepInfraError(f"command {self.argv[0]} exited with status {proc.returncode}{_tail(err)}")
        if not text.strip():
            raise StepInfraError(f"command {self.argv[0]} printed nothing{_tail(err)}")
        return Completion(text=text, model=self.model, usage=Usage(cost_known=False))


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _tail(stderr: bytes) -> str:
    lines = [line.strip() for line in stderr.decode("utf-8", errors="replace").splitlines() if line.strip()]
    if not lines:
        return ""
    last = lines[-1]
    return f": {last[-_STDERR_TAIL:]}"


class CommandGenerator(LLMGenerator):
    """`LLMGenerator` over a `CommandChatClient`; tells the command which task and step it answers."""

    client: CommandChatClient

    def generate(self, request: GenerationRequest) -> GenerationReply:
        """Run the command for `request` (see the module docstring)."""
        self.client.context = CommandRequest(request.task.key, request.step)
        return super().generate(request)
