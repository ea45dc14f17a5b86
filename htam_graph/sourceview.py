"""Views of a candidate's source for a prompt: numbered listings, numbered diffs against the base, and the
kernel part of a past example. Pure text functions.

Line numbers are the candidate file's own (the worker writes the source to its file unchanged), so an error
excerpt's `candidate.py:N` points at line N of what the model is shown.
"""

from __future__ import annotations

import ast
import difflib
import re

__all__ = ["candidate_view", "first_sentence", "kernel_excerpt", "numbered", "numbered_diff", "tidy_excerpt"]

_CANDIDATE_FILE = re.compile(r"candidate_[0-9a-f]{16}\.py")
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "approx.")


def tidy_excerpt(excerpt: str) -> str:
    """An error excerpt with the worker's hashed candidate file name shown as `candidate.py`."""
    return _CANDIDATE_FILE.sub("candidate.py", excerpt)


def numbered(source: str) -> str:
    """`source` with a right-aligned line number and `| ` before every line."""
    lines = source.rstrip("\n").splitlines()
    width = len(str(len(lines)))
    return "\n".join(f"{n:>{width}} | {line}" for n, line in enumerate(lines, start=1))


def numbered_diff(base: str, candidate: str, context: int = 2) -> str:
    """A unified-style diff from `base` to `candidate` in which every kept (` `) and added (`+`) line carries
    its line number in the candidate and removed (`-`) lines carry none. "" when the two are equal."""
    old, new = base.rstrip("\n").splitlines(), candidate.rstrip("\n").splitlines()
    width = len(str(max(len(new), 1)))
    blank = " " * width
    out: list[str] = []
    for group in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        out.append(f"@@ candidate lines {first[3] + 1}-{last[4]} (base lines {first[1] + 1}-{last[2]}) @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [f"{j + 1:>{width}}   {new[j]}" for j in range(j1, j2)]
                continue
            out += [f"{blank} - {old[i]}" for i in range(i1, i2)]
            out += [f"{j + 1:>{width}} + {new[j]}" for j in range(j1, j2)]
    return "\n".join(out)


def candidate_view(base: str, candidate: str, max_diff_share: float = 0.5, max_diff_lines: int = 80) -> str:
    """A fenced view of `candidate` for the prompt: a numbered diff against `base` when it is small (at most
    `max_diff_lines` lines and `max_diff_share` of the candidate's length), else the whole numbered source."""
    diff = numbered_diff(base, candidate)
    lines = len(candidate.splitlines())
    if diff and len(diff.splitlines()) <= min(max_diff_lines, max_diff_share * lines):
        head = "Changes from the current best version (numbers are the candidate's line numbers):"
        return f"{head}\n```diff\n{diff}\n```"
    return f"Its source, numbered:\n```\n{numbered(candidate)}\n```"


def kernel_excerpt(source: str, limit: int = 2500) -> str:
    """The kernel part of a candidate (its `@triton.jit` functions, or the CUDA source strings holding
    `__global__`), clipped at a line boundary to `limit` characters; the whole source when none is found."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return _clip_lines(source, limit)
    parts: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list):
            segment = ast.get_source_segment(source, node)
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            lines = source.splitlines()[start - 1 : node.lineno - 1]
            parts.append("\n".join(lines + [segment or ""]))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value:
            parts.append(node.value.strip("\n"))
    return _clip_lines("\n\n".join(parts) if parts else source, limit)


def _is_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Attribute) and target.attr in {"jit", "autotune", "heuristics"}


def _clip_lines(text: str, limit: int) -> str:
    text = text.strip("\n")
    if len(text) <= limit:
        return text
    kept = text[:limit].rsplit("\n", 1)[0]
    return kept + "\n# ... (cut)"


def first_sentence(text: str) -> str:
    """The first whole sentence of `text` (abbreviations such as "e.g." do not end one); never cut inside
    it."""
    flat = " ".join(text.split())
    protected = flat
    for abbr in _ABBREVIATIONS:
        protected = protected.replace(abbr, abbr.replace(".", "\0"))
    match = re.search(r"[.!?](?=\s+[A-Z(`]|\s*$)", protected)
    sentence = protected[: match.end()] if match else protected
    return sentence.replace("\0", ".").strip()
