"""Find the candidate `ModelNew` source in an LLM reply.

Handles the reply shapes models actually produce: one or several fenced blocks (``` or ~~~, tagged
python/py or untagged), reasoning in `<think>...</think>` (never parsed as code), prose before or after the
code, unfenced code, an unclosed fence (a truncated reply), and the common split where the CUDA source sits
in its own ```cpp / ```cuda block while the Python block refers to it by a variable name (merged back in).

The result is either a source that parses and defines `class ModelNew`, or None with a reason that can be
shown to the user and fed back to the model.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass

from htam_graph.model import NO_STRATEGY_KEY

_THINK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_CLOSE_THINK = re.compile(r"</(think|thinking|reasoning)>", re.IGNORECASE)
_OPEN_THINK = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
_FENCE_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\s`]*)[^`]*$")
_CODE_START = re.compile(r"^(import\s+\w|from\s+[\w.]+\s+import\s)")
_CPP_TAGS = {"cpp", "c++", "cuda", "cu", "c", "cxx", "cc", "h", "hpp"}
_SOURCE_NAME = re.compile(r"(cuda|cpp|cxx|source|src|kernel|code)", re.IGNORECASE)
_KNOWN_NAMES = set(dir(builtins)) | {"__name__", "__file__", "__doc__", "__spec__"}
_MAX_TRIMS = 50
# Prose starts at column 0 with a capitalised word, markdown, or a list marker; truncated code rarely does.
_PROSE_LINE = re.compile(r"^([A-Z][a-z']*[\s:,.!]|[A-Z][a-z]+$|\*\*|#+\s|[-*>]\s|\d+[.)]\s)")


# `STRATEGY: key` in any case, with markdown around it (`**Strategy:** \`key\``, `> strategy - key`).
_STRATEGY_LINE = re.compile(r"^[\s>#*_-]*strategy[\s*_]*[:=\-][\s*_`'\"]*(?P<value>.*)$", re.IGNORECASE)
_STRATEGY_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
# "none", "N/A", "no applicable strategy" (keys hold no spaces, so "no.such.key" is a key)
_NO_STRATEGY = re.compile(r"^((none|n/a)(?!\w|\.\w)|no\s)", re.IGNORECASE)


@dataclass(frozen=True)
class ExtractResult:
    """`source` is None when the reply holds no usable code; `reason` says why (or how it was found)."""

    source: str | None
    reason: str


@dataclass(frozen=True)
class _Block:
    lang: str
    body: str
    closed: bool


def extract_code(text: str) -> ExtractResult:
    """Extract the Python file defining `class ModelNew` from a model's reply."""
    text = text.replace("\r\n", "\n").lstrip("\ufeff")
    if not text.strip():
        return ExtractResult(None, "empty reply")
    visible = strip_reasoning(text)
    if visible is None:
        return ExtractResult(None, "the reply is only reasoning: <think> was never closed (truncated?)")
    blocks = _fenced_blocks(visible)
    if blocks:
        return _from_blocks(blocks)
    return _from_unfenced(visible)


def named_strategy(text: str) -> str | None:
    """The key on the reply's first `STRATEGY:` line outside reasoning and code blocks, as written; "none"
    when the model says no strategy applies; None without such a line (or when the reply is only
    reasoning)."""
    visible = strip_reasoning(text.replace("\r\n", "\n"))
    if visible is None:
        return None
    fence: str | None = None
    for line in visible.split("\n"):
        opening = _FENCE_OPEN.match(line)
        if fence is not None:
            if re.match(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$", line):
                fence = None
            continue
        if opening:
            fence = opening["fence"]
            continue
        match = _STRATEGY_LINE.match(line)
        if match is None:
            continue
        value = match["value"].strip().strip("*_`'\" ")
        if _NO_STRATEGY.match(value):
            return NO_STRATEGY_KEY
        key = _STRATEGY_KEY.match(value)
        if key is not None:
            return key.group(0).rstrip(".-")
    return None


def strip_reasoning(text: str) -> str | None:
    """Remove `<think>...</think>` spans; None if reasoning opens and never closes."""
    text = _THINK.sub("", text)
    closes = list(_CLOSE_THINK.finditer(text))
    if closes:  # a close without an open: the chat template opened it in the prompt
        text = text[closes[-1].end() :]
    if _OPEN_THINK.search(text):
        return None
    return text


def _fenced_blocks(text: str) -> list[_Block]:
    blocks: list[_Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        match = _FENCE_OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        fence, lang = match["fence"], match["info"].lower()
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not closing.match(lines[i]):
            body.append(lines[i])
            i += 1
        blocks.append(_Block(lang, "\n".join(body).strip("\n"), closed=i < len(lines)))
        i += 1
    return blocks


def _from_blocks(blocks: list[_Block]) -> ExtractResult:
    py_blocks = [b for b in blocks if b.lang not in _CPP_TAGS]  # untagged or unknown tags may be Python
    defining = [b for b in py_blocks if re.search(r"^\s*class\s+ModelNew\b", b.body, re.MULTILINE)]
    if not defining:
        return ExtractResult(
            None, f"no code block defines class ModelNew ({len(blocks)} block(s) in the reply)"
        )
    chosen = defining[-1]  # the last version is the model's final answer
    # A fenced block is never trimmed: an error inside it is the model's, and cutting it could turn a
    # truncated reply into a shorter file that parses but computes nothing.
    tree, error = _parse(chosen.body, trim_prose=False)
    if tree is None:
        unclosed = "" if chosen.closed else " (the block is not closed: reply truncated?)"
        return ExtractResult(
            None, f"the code block defining class ModelNew does not parse: {error}{unclosed}"
        )
    if not _defines_model_new(tree):
        return ExtractResult(None, "class ModelNew is not defined in the block that names it")
    others = [b for b in blocks if b is not chosen]
    source, merged = _resolve_undefined(_source_of(chosen.body, tree), tree, others)
    note = f"; merged {', '.join(merged)} from other blocks" if merged else ""
    which = f"block {blocks.index(chosen) + 1} of {len(blocks)}"
    return ExtractResult(source, f"ok: fenced {chosen.lang or 'untagged'} {which}{note}")


def _from_unfenced(text: str) -> ExtractResult:
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if _CODE_START.match(line)), None)
    if start is None:
        return ExtractResult(None, "no code: the reply has no fenced block and no line starting with import")
    body = "\n".join(lines[start:])
    tree, error = _parse(body, trim_prose=True)
    if tree is None:
        return ExtractResult(None, f"unfenced code does not parse: {error}")
    if not _defines_model_new(tree):
        return ExtractResult(None, "no code defines class ModelNew")
    return ExtractResult(_source_of(body, tree), "ok: unfenced code")


def _parse(body: str, *, trim_prose: bool) -> tuple[ast.Module | None, str]:
    """Parse `body`; with `trim_prose`, cut the tail from a syntax error on a line that looks like prose."""
    lines = body.split("\n")
    first_error = ""
    for _ in range(_MAX_TRIMS):
        try:
            return _drop_trailing_prose(ast.parse("\n".join(lines))), ""
        except SyntaxError as e:
            first_error = first_error or f"line {e.lineno}: {e.msg}"
            line = lines[e.lineno - 1] if e.lineno and 1 < e.lineno <= len(lines) else ""
            if not trim_prose or not _PROSE_LINE.match(line):
                return None, first_error
            lines = lines[: (e.lineno or 1) - 1]
    return None, first_error


def _drop_trailing_prose(tree: ast.Module) -> ast.Module:
    """Drop trailing statements that are prose that happens to parse (`Note: this is fast`, `Done`)."""
    body = list(tree.body)
    while body and (
        (isinstance(body[-1], ast.Expr) and isinstance(body[-1].value, ast.Name | ast.Compare | ast.BinOp))
        or (isinstance(body[-1], ast.AnnAssign) and body[-1].value is None)
    ):
        body.pop()
    return ast.Module(body=body, type_ignores=tree.type_ignores)


def _defines_model_new(tree: ast.Module) -> bool:
    return any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in ast.walk(tree))


def _source_of(body: str, tree: ast.Module) -> str:
    """The lines of `body` covered by `tree` (the trimmed tail removed)."""
    end = max((getattr(node, "end_lineno", 0) or 0) for node in tree.body)
    return "\n".join(body.split("\n")[:end]).rstrip() + "\n"


def undefined_names(tree: ast.Module) -> set[str]:
    """Names read somewhere but bound nowhere in the module (scope-insensitive, so it under-reports)."""
    bound: set[str] = set()
    loaded: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            bound.update(node.names)
    return loaded - bound - _KNOWN_NAMES


def _resolve_undefined(source: str, tree: ast.Module, others: list[_Block]) -> tuple[str, list[str]]:
    """Merge in definitions the chosen block uses but another block holds (C++ sources, helper kernels)."""
    missing = sorted(undefined_names(tree))
    if not missing or not others:
        return source, []
    prefix: list[str] = []
    merged: list[str] = []
    cpp_blocks = [b for b in others if b.lang in _CPP_TAGS]
    for name in missing:
        helper = _python_block_defining(name, others)
        if helper is not None and helper not in prefix:
            prefix.append(helper)
            merged.append(name)
            continue
        cpp = _cpp_block_for(name, cpp_blocks) if _SOURCE_NAME.search(name) else None
        if cpp is not None:
            prefix.append(f"{name} = {_string_literal(cpp)}")
            merged.append(name)
    if not prefix:
        return source, []
    combined = _insert_after_imports(source, tree, "\n\n".join(prefix))
    try:
        ast.parse(combined)
    except SyntaxError:  # a helper block that does not fit: keep the block as the model wrote it
        return source, []
    return combined, merged


def _python_block_defining(name: str, blocks: list[_Block]) -> str | None:
    for block in blocks:
        if block.lang in _CPP_TAGS:
            continue
        try:
            tree = ast.parse(block.body)
        except SyntaxError:
            continue
        if _defines_model_new(tree):
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
                return block.body
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets
            ):
                return block.body
    return None


def _cpp_block_for(name: str, blocks: list[_Block]) -> str | None:
    """Pick the C++ block a source variable means: CUDA kernels for *cuda* names, declarations for *cpp*."""
    if len(blocks) == 1:
        return blocks[0].body
    lowered = name.lower()
    with_kernels = [b for b in blocks if "__global__" in b.body]
    without = [b for b in blocks if "__global__" not in b.body]
    if "cuda" in lowered or lowered.startswith("cu_"):
        return with_kernels[0].body if len(with_kernels) == 1 else None
    if "cpp" in lowered or "cxx" in lowered:
        return without[0].body if len(without) == 1 else None
    return None


def _string_literal(text: str) -> str:
    """A readable Python literal for C++ source: a raw triple-quoted string when that is exact."""
    if "'''" not in text and not text.endswith("\\"):
        return "r'''\n" + text + "\n'''"
    return repr(text)


def _insert_after_imports(source: str, tree: ast.Module, addition: str) -> str:
    lines = source.split("\n")
    last_import = 0
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            last_import = node.end_lineno or node.lineno
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            break
    merged = lines[:last_import] + ["", addition, ""] + lines[last_import:]
    return "\n".join(merged)
