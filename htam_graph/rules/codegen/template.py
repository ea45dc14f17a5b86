"""Generated code written as it reads: an indented block of text with `$name` placeholders.

`fill` dedents the block (so a template sits at the indentation of the code that uses it), substitutes the
placeholders (`string.Template`: `$name` or `${name}`; `$$` is a literal dollar sign) and indents the result
as asked. `lines` gives it as a list of lines, for emitters that assemble a file line by line. A generated
line longer than the source's limit continues after a backslash-newline, which Python removes.

A placeholder alone on its line is a block: its value may span several lines, each indented like the
placeholder, and an empty value removes the line (an optional statement, a loop of per-operand loads). A
value may be a string or a list of lines.
"""

from __future__ import annotations

import re
import string
import textwrap

__all__ = ["fill", "lines"]

# A line holding only a placeholder (and the indentation its block takes).
_BLOCK = re.compile(r"([ \t]*)\$(?:([_a-zA-Z][_a-zA-Z0-9]*)|\{([_a-zA-Z][_a-zA-Z0-9]*)\})[ \t]*")


def fill(template: str, indent: str = "", **values: object) -> str:
    """The dedented template with every placeholder replaced (one without a value raises KeyError), then
    indented by `indent` (blank lines stay empty)."""
    texts = {name: _text(value) for name, value in values.items()}
    out: list[str] = []
    for line in textwrap.dedent(template).split("\n"):
        block = _BLOCK.fullmatch(line)
        if block is None:
            out.append(string.Template(line).substitute(texts))
        elif text := texts[block[2] or block[3]].removesuffix("\n"):
            out.append(textwrap.indent(text, block[1]))
    return textwrap.indent("\n".join(out), indent)


def lines(template: str, indent: str = "", **values: object) -> list[str]:
    """`fill`'s result as lines, without the template's leading and trailing newline."""
    return fill(template, indent, **values).strip("\n").split("\n")


def _text(value: object) -> str:
    """A placeholder's text: a list of lines (or blocks, each without its final newline) joined by
    newlines; anything else (a tuple too) as `str` gives it."""
    if isinstance(value, list):
        return "\n".join(str(item).removesuffix("\n") for item in value)
    return str(value)
