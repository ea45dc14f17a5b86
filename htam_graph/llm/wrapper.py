"""The base of a generator that wraps another one (the reply box, the replay recorder).

Such a wrapper answers to the inner generator's name and passes on what the loop may ask besides `generate`:
a resumed run's earlier steps (see `ReplayGenerator.resumed`) and a replay's recorded choices.
"""

from __future__ import annotations

from collections.abc import Sequence

from htam_graph.ports import Generator, RecordedChoices


class WrappedGenerator:
    """Holds `inner` and passes `resumed` and `recorded_choice` on to it; subclasses give `generate`."""

    def __init__(self, inner: Generator) -> None:
        self.inner = inner
        self.name = inner.name

    def resumed(self, task_key: str, steps: Sequence[int]) -> None:
        """Pass a resumed run's earlier steps on to the inner generator."""
        forward = getattr(self.inner, "resumed", None)
        if forward is not None:
            forward(task_key, steps)

    def recorded_choice(self, task_key: str, step: int) -> tuple[str, str | None] | None:
        """The inner generator's recorded choice (a replay), else None."""
        if isinstance(self.inner, RecordedChoices):
            return self.inner.recorded_choice(task_key, step)
        return None
