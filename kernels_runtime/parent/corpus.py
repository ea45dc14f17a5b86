"""The adversarial corpus and the good candidates (tests/data/...), read by the tests and the GPU check script.

Each adversarial file starts with a machine-readable header:

    # htam-adversarial
    # pitfall: <evaluation.md number and what the file does>
    # task: level1/22_Tanh.py            (relative to a KernelBench root)
    # expected_kind: mismatch            (an ErrorKind value)
    # expected_check: a|b                (the named check(s) that may carry the failure)
    # runs_on: cpu,gpu

`shrink_task` re-binds a task's size constants at the end of its source: CPU tests run the same tasks at sizes the
Triton interpreter gets through in seconds (the GPU script uses the real default sizes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from htam_graph.model import ErrorKind

__all__ = ["CorpusEntry", "load_corpus", "candidate_task", "shrink_task", "CPU_TEST_SIZES"]

_FIELD = re.compile(r"^# (pitfall|task|expected_kind|expected_check|runs_on): (.+)$", re.MULTILINE)
_TASK = re.compile(r"^# task: (\S+)", re.MULTILINE)

# Sizes for CPU tests of the corpus tasks (the smoke search then picks its variants inside these).
CPU_TEST_SIZES: dict[str, dict[str, int]] = {
    "level1/20_LeakyReLU.py": {"batch_size": 4, "dim": 8192},
    "level1/22_Tanh.py": {"batch_size": 4, "dim": 8192},
    "level1/24_LogSoftmax.py": {"batch_size": 4, "dim": 8192},
    "level1/2_Standard_matrix_multiplication_.py": {"M": 64, "K": 128, "N": 64},
}


@dataclass(frozen=True)
class CorpusEntry:
    """One adversarial candidate and what the runtime must say about it."""

    path: Path
    pitfall: str
    task: str
    expected_kind: ErrorKind
    expected_checks: tuple[str, ...]
    runs_on: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def source(self) -> str:
        return self.path.read_text(encoding="utf-8")


def load_corpus(folder: Path) -> list[CorpusEntry]:
    """Every `*.py` with an `# htam-adversarial` header in `folder`, sorted by name."""
    entries = []
    for path in sorted(folder.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if not text.startswith("# htam-adversarial"):
            continue
        fields = dict(_FIELD.findall(text))
        entries.append(
            CorpusEntry(
                path=path,
                pitfall=fields["pitfall"].strip(),
                task=fields["task"].strip(),
                expected_kind=ErrorKind(fields["expected_kind"].strip()),
                expected_checks=tuple(c.strip() for c in fields["expected_check"].split("|")),
                runs_on=tuple(d.strip() for d in fields["runs_on"].split(",")),
            )
        )
    return entries


def candidate_task(source: str) -> str | None:
    """The `# task:` a candidate file declares, if any."""
    m = _TASK.search(source)
    return m.group(1) if m else None


def shrink_task(source: str, sizes: Mapping[str, int]) -> str:
    """The task with its size constants re-bound at the end (get_inputs reads them at call time)."""
    lines = "\n".join(f"{k} = {v}" for k, v in sizes.items())
    return f"{source.rstrip()}\n\n# htam: sizes reduced for CPU tests\n{lines}\n"
