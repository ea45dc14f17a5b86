"""Short, relevant error excerpts for the LLM and the user (≤ ~1500 characters).

A full traceback through torch internals or a 300-line nvcc log drowns the one line that matters. We keep the
candidate's own frames, the exception line, and from compiler logs the lines that say `error`.
"""

from __future__ import annotations

import re
import traceback

__all__ = ["MAX_EXCERPT", "clip", "exception_excerpt", "build_log_excerpt"]

MAX_EXCERPT = 1500
_ERROR_LINE = re.compile(r"error|Error|ERROR|undefined|expected|invalid")


def clip(text: str, limit: int = MAX_EXCERPT) -> str:
    """Keep the head and the tail of `text` when it is longer than `limit` (the tail usually holds the cause)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = limit // 3
    return text[:head] + "\n[...]\n" + text[-(limit - head - 7) :]


def build_log_excerpt(log: str, limit: int = MAX_EXCERPT) -> str:
    """From a compiler log keep the lines mentioning an error, each with the line after it (nvcc's caret)."""
    lines = log.splitlines()
    keep: list[str] = []
    for i, line in enumerate(lines):
        if _ERROR_LINE.search(line):
            keep.extend(lines[i : i + 2])
    chosen = "\n".join(dict.fromkeys(keep)) if keep else log
    return clip(chosen, limit)


def exception_excerpt(exc: BaseException, candidate_file: str | None = None, limit: int = MAX_EXCERPT) -> str:
    """The candidate's frames (file:line and code) and the exception message, clipped to `limit`."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if candidate_file is not None and f.filename == candidate_file]
    shown = own or frames[-2:]
    where = "".join(
        f"  {f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name}: {(f.line or '').strip()}\n" for f in shown
    )
    message = f"{type(exc).__name__}: {exc}"
    if "Error building extension" in message or "ninja" in message:
        message = build_log_excerpt(message, limit - len(where) if len(where) < limit // 2 else limit // 2)
    text = (where + message) if where else message
    return clip(text, limit)
