"""Turns a task's reference into a candidate (`Model` renamed `ModelNew`): the trusted "reference track".

A copied reference is the baseline candidate of every run and the harness's own sanity check (speedup ≈ 1.0,
which measures the noise floor). It launches no custom kernel, so it is evaluated with
`EvalRequest.candidate_kind = "reference"`, which turns the kernel-required checks off and is recorded in
`EvalResult.checks`. A header comment inside the source would be a switch the LLM could flip, so there is none.
"""

from __future__ import annotations

import io
import tokenize

__all__ = ["reference_as_candidate"]


def reference_as_candidate(task_source: str) -> str:
    """Rename every `Model` identifier token (not strings or comments) to `ModelNew`."""
    lines = task_source.splitlines(keepends=True)
    hits: list[tuple[int, int]] = []
    for tok in tokenize.generate_tokens(io.StringIO(task_source).readline):
        if tok.type == tokenize.NAME and tok.string == "Model":
            hits.append(tok.start)
    for row, col in reversed(hits):  # right to left keeps earlier columns valid
        line = lines[row - 1]
        lines[row - 1] = line[:col] + "ModelNew" + line[col + len("Model") :]
    return "".join(lines)
