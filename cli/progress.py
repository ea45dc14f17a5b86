"""Progress of `htam-graph run` on stderr (also under `--json`, whose stdout holds only the JSON).

Each step shows what it is waiting for: "waiting for the model (N s)" while the generator works, "evaluating
(N s)" while the candidate is checked and timed. On a terminal that line is live; elsewhere (a log file, a
pipe) each phase is printed once as it starts. Retries of the backend and each step's outcome are printed as
lines, with the time the step spent on the model and on the evaluation.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from htam_graph.runtypes import StepOutcome

_PHASES = {"generating": "waiting for the model", "evaluating": "evaluating"}


class StepProgress:
    """Use as a context manager around one run; pass `phase` as the loop's `on_phase`, `step` after each
    step."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._live = console.is_terminal
        self._status: Status | None = None
        self._label = "starting"
        self._since = time.monotonic()
        self._spent: dict[str, float] = {}
        self._phase: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> StepProgress:
        if self._live:
            self._status = self.console.status(self._label)
            self._status.start()
            self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
            self._ticker.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
        if self._status is not None:
            self._status.stop()

    def phase(self, step: int, phase: str) -> None:
        """Step `step` starts `phase` ("generating" or "evaluating")."""
        with self._lock:
            self._close_phase()
            self._phase = phase
            self._label = f"step {step}: {_PHASES.get(phase, phase)}"
            self._since = time.monotonic()
        if not self._live:
            self.console.print(f"  {self._label}…", highlight=False)

    def retry(self, message: str) -> None:
        """A backend call failed and is retried."""
        self.console.print(f"  [yellow]retry[/]: {escape(message)}", highlight=False)

    def step(self, s: StepOutcome) -> None:
        """Step `s` is done: its outcome, and where its time went."""
        with self._lock:
            self._close_phase()
            spent, self._spent = self._spent, {}
            self._label = f"step {s.step + 1}: choosing"
        times = ", ".join(f"{'model' if k == 'generating' else 'eval'} {v:.0f} s" for k, v in spent.items())
        self.console.print(step_line(s) + (f"   ({times})" if times else ""), highlight=False)

    def _close_phase(self) -> None:
        if self._phase is not None:
            self._spent[self._phase] = self._spent.get(self._phase, 0.0) + time.monotonic() - self._since
            self._phase = None

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                text = f"{self._label} ({time.monotonic() - self._since:.0f} s)"
            if self._status is not None:
                self._status.update(text)


def step_line(s: StepOutcome) -> str:
    """One step's outcome as a progress line (rich markup)."""
    outcome = {"improved": "[green]improved[/]", "correct": "[yellow]correct[/]", "failed": "[red]failed[/]"}[
        s.status
    ]
    why = f" ({s.error_kind.value})" if s.error_kind else ""
    speed = f" {s.speedup_x:.3f}x" if s.speedup_x else ""
    gen = s.generation
    notes = []
    if gen is not None and gen.named is not None and gen.chosen != (gen.offered[0] if gen.offered else None):
        notes.append(f"chose {gen.chosen}")
    if gen is not None and gen.truncated:
        notes.append("reply truncated")
    extra = f" [{', '.join(notes)}]" if notes else ""
    return (
        f"  step {s.step}: {s.global_key} / {s.local_key or '-'} -> {outcome}{why}{speed}{escape(extra)}"
        f"   best {s.best_speedup_x:.3f}x"
    )
