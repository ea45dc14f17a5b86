"""Short, relevant error excerpts for the LLM and the user (≤ ~1500 characters).

A full traceback through torch internals or a 300-line nvcc log drowns the one line that matters. We keep the
candidate's own frames, the innermost library frame (where the error was raised: `triton/language/core.py` says
more than "TypeError"), the exception line, and from compiler logs the lines that say `error`. A Triton
compilation error numbers its lines from the kernel's `def` ("at 5:12:"); the excerpt adds the line of the
candidate file it is, so every line number points into the file the model is shown.
"""

from __future__ import annotations

import re
import traceback

__all__ = ["MAX_EXCERPT", "clip", "exception_excerpt", "build_log_excerpt", "triton_location"]

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


def _chain(exc: BaseException, depth: int = 5) -> list[BaseException]:
    """`exc` and the exceptions it was raised from (explicit causes, or the implicit context), outermost first."""
    chain = [exc]
    while len(chain) < depth:
        last = chain[-1]
        nxt = last.__cause__ or (None if last.__suppress_context__ else last.__context__)
        if nxt is None or any(nxt is e for e in chain):
            break
        chain.append(nxt)
    return chain


def _short(filename: str) -> str:
    """A library path from its package on (`.../site-packages/triton/language/core.py` -> `triton/language/...`)."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename.rsplit("/", 1)[-1]


def triton_location(exc: BaseException, candidate_file: str | None) -> str:
    """For a Triton CompilationError ("at L:C:" counted from the kernel's `def`), the candidate-file line it
    points at, as `candidate_x.py:N: <code>`; "" for any other error or when the kernel is not found."""
    src, node = getattr(exc, "src", None), getattr(exc, "node", None)
    lineno = getattr(node, "lineno", None)
    if candidate_file is None or not isinstance(src, str) or not isinstance(lineno, int):
        return ""
    try:
        with open(candidate_file, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    head = src.lstrip("\n").splitlines()[0].strip() if src.strip() else ""
    starts = [i for i, line in enumerate(lines) if line.strip() == head]
    if len(starts) != 1:
        return ""
    n = starts[0] + lineno  # `def` is line 1 of the kernel
    code = lines[n - 1].strip() if 0 < n <= len(lines) else ""
    return f"  Triton compile error at {candidate_file.rsplit('/', 1)[-1]}:{n}: {code}\n"


def exception_excerpt(exc: BaseException, candidate_file: str | None = None, limit: int = MAX_EXCERPT) -> str:
    """The candidate's frames (file:line and code), the innermost library frame below them, and the exception
    message, clipped to `limit`."""
    chain = _chain(exc)
    frames = traceback.extract_tb(exc.__traceback__)
    # An error re-raised by a wrapper (Triton's interpreter raises InterpreterError from the kernel's own
    # error) keeps the candidate's deeper frames on its cause: collect them from the whole chain.
    every = [f for e in chain for f in traceback.extract_tb(e.__traceback__)]
    own = list({(f.lineno, f.name): f for f in every if f.filename == candidate_file}.values())
    shown = own or frames[-2:]
    where = "".join(
        f"  {f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name}: {(f.line or '').strip()}\n" for f in shown
    )
    innermost = traceback.extract_tb(chain[-1].__traceback__)
    if own and innermost and innermost[-1].filename != candidate_file:
        inner = innermost[-1]
        where += f"  (raised in {_short(inner.filename)}:{inner.lineno} in {inner.name})\n"
    where += "".join(triton_location(e, candidate_file) for e in chain)
    message = f"{type(exc).__name__}: {exc}"
    if "Error building extension" in message or "ninja" in message:
        message = build_log_excerpt(message, limit - len(where) if len(where) < limit // 2 else limit // 2)
    text = (where + message) if where else message
    return clip(text, limit)
