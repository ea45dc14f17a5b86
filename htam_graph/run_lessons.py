"""What one run learns from its own failed steps, for the rest of that run (the memory learns across runs).

A failed step is recorded as negative evidence for its strategy, but one negative attempt barely moves that
strategy's upper-confidence value: without these lessons a run can spend all its steps on strategies that fail
with the same error (say `AttributeError: 'ModelNew' object has no attribute '_tensor_constant0'`). So:

- A failed step's *error class* is its error kind, with the exception type for compile and runtime errors
  (`runtime_error:AttributeError`). Infrastructure failures have none: they are not the strategy's failure.
- When a class occurs a second time in the run, every local strategy that failed with it is *demoted* for the
  rest of the run: its penalty is the number of its failures in repeated classes. The loop then chooses among
  the least penalised local strategies of a direction, and draws a direction all of whose strategies are
  penalised only when no other allowed direction has an unpenalised one. The attempts themselves are recorded
  as any failure is: negative evidence for their strategy.
- With a deterministic generator (the offline rules), a step whose candidate raised (no code, a compile or
  runtime error, a crash) *bans* its strategy for the rest of the run while the inputs it was generated from
  are the same (the task is fixed; the base kernel, the run's best so far, may change): the same recipe on the
  same inputs would raise again. A strategy whose candidates mismatched the reference twice on the same
  inputs is banned alike: a tuning recipe writes a new configuration each time, but of the same kernel, which
  does not become right by tuning (a kernel whose output differs in the last bit where the task compares
  floats for equality, say)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from htam_graph.model import ErrorKind, LocalWithEvidence

__all__ = ["RAISED", "RunLessons", "error_class", "inputs_digest"]

RAISED = frozenset({ErrorKind.NO_CODE, ErrorKind.COMPILE_ERROR, ErrorKind.RUNTIME_ERROR, ErrorKind.CRASH})
MISMATCHES_TO_BAN = 2
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))\b")


def error_class(kind: ErrorKind | None, excerpt: str) -> str | None:
    """The class of a failure (see the module docstring); None when it is not a strategy's failure."""
    if kind is None or kind is ErrorKind.INFRA_ERROR:
        return None
    if kind in (ErrorKind.COMPILE_ERROR, ErrorKind.RUNTIME_ERROR):
        for line in excerpt.splitlines():
            found = _EXCEPTION.match(line.strip())
            if found and not line.startswith("  "):  # indented lines are the traceback's frames
                return f"{kind.value}:{found.group(1).rsplit('.', 1)[-1]}"
    return kind.value


def inputs_digest(base_source: str) -> str:
    """What a deterministic generator's candidate depends on within one run: the base kernel it starts
    from."""
    return hashlib.sha256(base_source.encode()).hexdigest()


@dataclass
class RunLessons:
    """The failures of one run so far (see the module docstring)."""

    # error class -> local keys that failed with it
    by_class: dict[str, list[str]] = field(default_factory=dict)
    # local key -> failures in repeated classes
    penalties: dict[str, int] = field(default_factory=dict)
    # (local key, inputs digest) whose candidate raised, or mismatched MISMATCHES_TO_BAN times
    banned: set[tuple[str, str]] = field(default_factory=set)
    # (local key, inputs digest) -> mismatches
    mismatches: dict[tuple[str, str], int] = field(default_factory=dict)

    def learn(self, local_key: str | None, kind: ErrorKind | None, excerpt: str, inputs: str) -> bool:
        """Take in one step's outcome; True when its failure repeats a class seen earlier in the run."""
        klass = error_class(kind, excerpt)
        if local_key is None or klass is None:
            return False
        if kind in RAISED:
            self.banned.add((local_key, inputs))
        if kind is ErrorKind.MISMATCH:
            seen = self.mismatches[(local_key, inputs)] = self.mismatches.get((local_key, inputs), 0) + 1
            if seen >= MISMATCHES_TO_BAN:
                self.banned.add((local_key, inputs))
        earlier = self.by_class.setdefault(klass, [])
        earlier.append(local_key)
        # every failure in a class that occurred more than once counts against its strategy
        self.penalties = {}
        for keys in self.by_class.values():
            if len(keys) > 1:
                for key in keys:
                    self.penalties[key] = self.penalties.get(key, 0) + 1
        return len(earlier) > 1

    def penalty(self, local_key: str) -> int:
        """How far the strategy is demoted in this run (0: not at all)."""
        return self.penalties.get(local_key, 0)

    def least_penalised(self, candidates: Sequence[LocalWithEvidence]) -> list[LocalWithEvidence]:
        """The candidates with the smallest penalty (all of them when none is penalised)."""
        if not candidates or not self.penalties:
            return list(candidates)
        lowest = min(self.penalty(c.strategy.key) for c in candidates)
        return [c for c in candidates if self.penalty(c.strategy.key) == lowest]

    def banned_locals(self, inputs: str) -> set[str]:
        """Strategies whose candidate raised (or mismatched twice) in this run on these same inputs."""
        return {key for key, digest in self.banned if digest == inputs}
