"""Generated code written as it reads: an indented block of text with `$name` placeholders.

`fill` dedents the block (so a template sits at the indentation of the code that uses it), substitutes the
placeholders (`string.Template`: `$name` or `${name}`; `$$` is a literal dollar sign) and indents the result
as asked. `lines` gives it as a list of lines, for emitters that assemble a file line by line. A generated
line longer than the source's limit continues after a backslash-newline, which Python removes.
"""

from __future__ import annotations

import string
import textwrap

__all__ = ["fill", "lines"]


def fill(template: str, indent: str = "", **values: object) -> str:
    """The dedented template with every placeholder replaced (one without a value raises KeyError), then
    indented by `indent` (blank lines stay empty)."""
    text = string.Template(textwrap.dedent(template)).substitute({k: str(v) for k, v in values.items()})
    return textwrap.indent(text, indent)


def lines(template: str, indent: str = "", **values: object) -> list[str]:
    """`fill`'s result as lines, without the template's leading and trailing newline."""
    return fill(template, indent, **values).strip("\n").split("\n")
