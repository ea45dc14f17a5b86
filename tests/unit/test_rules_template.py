"""The text templates generated kernels are written with (htam_graph/rules/codegen/template.py)."""

from __future__ import annotations

import pytest

from htam_graph.rules.codegen import template


def test_fill_substitutes_dedents_and_indents() -> None:
    text = template.fill(
        """
        x = $a + ${b}1  # $$ stays a dollar
            y = x
        """,
        indent="  ",
        a="p",
        b="q",
    )
    assert text == "\n  x = p + q1  # $ stays a dollar\n      y = x\n"


def test_a_placeholder_alone_on_its_line_is_an_indented_block() -> None:
    body = "if ok:\n    z = 1\n\nw = 2\n"  # its final newline ends the placeholder's line
    text = template.fill("for i in r:\n    $body\ndone\n", body=body)
    assert text == "for i in r:\n    if ok:\n        z = 1\n\n    w = 2\ndone\n"


def test_an_empty_block_removes_its_line() -> None:
    assert template.fill("a\n  $opt\nb\n", opt="") == "a\nb\n"
    assert template.fill("a\n  ${opt}\nb\n", opt=[]) == "a\nb\n"


def test_a_list_value_is_lines_and_a_tuple_is_a_value() -> None:
    text = template.fill("f(\n    $params\n)\nd in $dims\n", params=["x,", "y,"], dims=(0,))
    assert text == "f(\n    x,\n    y,\n)\nd in (0,)\n"
    # list items may be blocks ending in a newline: no blank line between them
    assert template.fill("x:\n  $b\n", b=["p\n", "q\n"]) == "x:\n  p\n  q\n"


def test_a_missing_value_raises() -> None:
    with pytest.raises(KeyError):
        template.fill("x = $a\n")
    with pytest.raises(KeyError):
        template.fill("    $block\n")


def test_lines_drops_the_outer_newlines() -> None:
    assert template.lines("\n    a = $v\n    b\n", indent="  ", v=1) == ["  a = 1", "  b"]
