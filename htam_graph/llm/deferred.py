"""Replies that come later: `--backend files` and the reply box every run reads before asking its backend.

`FilesGenerator` never answers: it raises `AwaitingReply` with the rendered prompt, so the run stops at that
step and writes the request to `OUT/pending/` (see `pending.py`). Whoever answers (a person, another agent, a
model on another machine, a batch job) saves the reply there and runs the same command again.

`InboxGenerator` wraps a run's generator: for a request whose reply was saved in the run's `pending/` folder
it returns that reply (read exactly as a live one would be), and otherwise asks the inner generator. So a
reply saved by hand also answers a `replay:` run whose file lacked the request.
"""

from __future__ import annotations

import time
from pathlib import Path

from htam_graph.errors import AwaitingReply, StepInfraError
from htam_graph.llm.generator import reply_from_text
from htam_graph.llm.pending import SavedReply, read_pending, read_reply
from htam_graph.llm.prompts import load_templates, render_prompt
from htam_graph.llm.wrapper import WrappedGenerator
from htam_graph.model import GenerationReply, GenerationRequest
from htam_graph.ports import Generator


class FilesGenerator:
    """Writes nothing itself and answers nothing: every request is awaited (`AwaitingReply`)."""

    def __init__(self, name: str = "files", templates_dir: Path | None = None) -> None:
        self.name = name
        self._templates_dir = templates_dir

    def generate(self, request: GenerationRequest) -> GenerationReply:
        """Raise `AwaitingReply` carrying the rendered prompt of `request`."""
        prompt = render_prompt(request, load_templates(self._templates_dir))
        raise AwaitingReply(
            f"{self.name}: step {request.step} of {request.task.key} awaits its reply",
            prompt={"system": prompt.system, "memory": prompt.memory, "user": prompt.user},
        )


class InboxGenerator(WrappedGenerator):
    """A run's generator behind its reply box: a reply saved in `pending_dir` for the request answers it."""

    def __init__(self, inner: Generator, pending_dir: Path) -> None:
        super().__init__(inner)
        self.pending_dir = pending_dir

    def generate(self, request: GenerationRequest) -> GenerationReply:
        """The saved reply for `request` when there is one, else the inner generator's answer."""
        started = time.perf_counter()
        saved = self._saved(request)
        if saved is None:
            return self.inner.generate(request)
        if saved.error is not None or saved.text is None:
            raise StepInfraError(f"{self.name}: step {request.step}: {saved.error}")
        return reply_from_text(
            saved.text,
            model=saved.model or f"{self.name} (saved reply)",
            usage=saved.usage,
            stop_reason=saved.finish_reason,
            latency_s=time.perf_counter() - started,
        )

    def _saved(self, request: GenerationRequest) -> SavedReply | None:
        pending = read_pending(self.pending_dir, request.step)
        if pending is None or pending.pending.request != request:
            return None  # a reply answers only the very request written beside it (never a fresh run's)
        return read_reply(self.pending_dir, request.step)
