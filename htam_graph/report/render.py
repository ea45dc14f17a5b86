"""Markdown and self-contained HTML for a report page: a header block, warnings, definitions, tables and PNG
figures (embedded in the HTML as base64 data URIs; no external asset, script or font)."""

from __future__ import annotations

import base64
import html as _html
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child, table.header td { text-align: left; }
thead th { background: #f0f0f0; }
.warning { background: #fff3cd; border: 1px solid #e0b000; padding: 0.5em 1em; margin: 0.3em 0; }
figure { margin: 1em 0; } figcaption { font-size: 13px; color: #555; }
img { max-width: 100%; }
"""


@dataclass(frozen=True)
class Page:
    """Everything one report page shows, in order."""

    title: str
    header: list[tuple[str, str]]
    warnings: list[str]
    definitions: list[str]
    sections: list[tuple[str, pd.DataFrame]]  # the main tables
    extra: list[tuple[str, pd.DataFrame]]  # secondary tables
    figures: list[tuple[Path, str]]  # PNG path, caption


def md_table(df: pd.DataFrame, index: bool = True) -> str:
    """A GitHub-flavoured Markdown table (no tabulate dependency)."""
    frame = df.reset_index() if index and df.index.name is not None or df.index.nlevels > 1 else df
    cols = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(_md_cell(v) for v in row) + " |")
    return "\n".join(lines)


def _md_cell(value: object) -> str:
    text = "-" if value is None or (isinstance(value, float) and value != value) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(page: Page) -> str:
    """The page as Markdown (figures linked by file name, next to report.md)."""
    out = [f"# {page.title}", ""]
    out += [f"> **WARNING:** {w}" for w in page.warnings]
    out += ["", "| measured with | |", "|---|---|"]
    out += [f"| {k} | {_md_cell(v)} |" for k, v in page.header]
    out += ["", "## Definitions", ""] + [f"- {d}" for d in page.definitions]
    for title, df in [*page.sections, *page.extra]:
        out += ["", f"## {title}", "", md_table(df) if len(df) else "(none)"]
    if page.figures:
        out += ["", "## Figures", ""]
        out += [f"![{caption}]({path.name})\n\n{caption}\n" for path, caption in page.figures]
    return "\n".join(out) + "\n"


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def html(page: Page) -> str:
    """The page as one self-contained HTML document."""
    esc = _html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(page.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{esc(page.title)}</h1>",
    ]
    parts += [f'<div class="warning"><b>WARNING:</b> {esc(w)}</div>' for w in page.warnings]
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in page.header)
    parts.append(f'<table class="header"><tbody>{rows}</tbody></table>')
    parts.append(
        "<h2>Definitions</h2><ul>" + "".join(f"<li>{esc(d)}</li>" for d in page.definitions) + "</ul>"
    )
    for title, df in [*page.sections, *page.extra]:
        body = df.to_html(na_rep="-", border=0, classes="data") if len(df) else "<p>(none)</p>"
        parts.append(f"<h2>{esc(title)}</h2>{body}")
    if page.figures:
        parts.append("<h2>Figures</h2>")
        for path, caption in page.figures:
            parts.append(
                f'<figure><img alt="{esc(caption)}" src="{_data_uri(path)}">'
                f"<figcaption>{esc(caption)}</figcaption></figure>"
            )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
