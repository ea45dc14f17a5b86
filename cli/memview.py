"""`htam-graph memory view --html FILE`: an interactive HTML picture of the HTG drawn with neo4j-viz.

Globals are big nodes, locals small ones hanging off their direction (REFINES); node size grows with the
attempts recorded, colour is the mean gain (green better, red worse, grey no evidence). Evidence TRANSITION
edges (one per GPU architecture) are coloured by mean gain and thickened by count; the seed's prior edges are
thin, pale grey and captioned "prior" so they never pass for evidence. The graph is read through the
GraphStore port (`cypher/view_*.cypher`); neo4j-viz is imported only when a page is rendered.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from htam_graph.errors import HtamError, UnknownKeyError
from htam_graph.ports import GraphStore

PRIOR_COLOR = "#c8c8c8"
REFINES_COLOR = "#9ecae1"
NO_EVIDENCE_COLOR = "#b0b0b0"


class ViewError(HtamError):
    """The view cannot be drawn (empty memory, neo4j-viz missing)."""


@dataclass(frozen=True)
class ViewData:
    """The rows one view shows."""

    globals_: list[dict[str, Any]]
    locals_: list[dict[str, Any]]
    transitions: list[dict[str, Any]]
    focus: str | None
    min_count: int


def fetch_view(store: GraphStore, focus: str | None = None, min_count: int = 1) -> ViewData:
    """Read the globals, locals and transitions to draw. Raises UnknownKeyError for an unknown focus and
    ViewError when the memory holds no direction at all."""
    globals_ = store.run("view_globals")
    if not globals_:
        raise ViewError("the memory holds no direction: run `htam-graph memory seed` first")
    if focus is not None and focus not in {g["key"] for g in globals_}:
        raise UnknownKeyError(f"unknown direction {focus!r} for --focus")
    transitions = store.run("view_transitions", {"focus": focus, "min_count": min_count})
    if focus is not None:  # the focus, and the directions its transitions touch
        shown = {focus} | {t["src"] for t in transitions} | {t["dst"] for t in transitions}
        globals_ = [g for g in globals_ if g["key"] in shown]
    locals_ = store.run("view_locals", {"focus": focus})
    return ViewData(globals_, locals_, transitions, focus, min_count)


def gain_color(mean_gain: float | None) -> str:
    """Red (mean gain <= -0.5) through pale yellow (0) to green (>= +0.5); grey without evidence."""
    if mean_gain is None:
        return NO_EVIDENCE_COLOR
    x = max(-1.0, min(1.0, mean_gain / 0.5))
    if x >= 0:
        r, g, b = 255 - int(200 * x), 235 - int(60 * x), 160 - int(100 * x)
    else:
        r, g, b = 230, 235 + int(185 * x), 160 + int(100 * x)
    return f"#{r:02x}{g:02x}{b:02x}"


def _mean(total: float, n: int) -> float | None:
    return total / n if n else None


def _node_props(row: dict[str, Any], kind: str) -> dict[str, Any]:
    return {"kind": kind, **{k: v for k, v in row.items() if v is not None}}


def graph_entities(data: ViewData) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The nodes and relationships to draw, as neo4j-viz field dicts (ids are stable: one graph, one page)."""
    nodes: list[dict[str, Any]] = []
    rels: list[dict[str, Any]] = []
    for g in data.globals_:
        n = int(g["attempts"])
        nodes.append(
            {
                "id": f"Global:{g['key']}",
                "caption": g["key"],
                "size": 18 + 6 * math.log2(1 + n),
                "color": gain_color(_mean(float(g["gain_sum"]), n)),
                "properties": _node_props(g, "Global"),
            }
        )
    shown = {g["key"] for g in data.globals_}
    for loc in (x for x in data.locals_ if x["global_key"] in shown):
        n = int(loc["attempts"])
        nodes.append(
            {
                "id": f"Local:{loc['key']}",
                "caption": loc["key"].split(".", 1)[-1],
                "size": 7 + 3 * math.log2(1 + n),
                "color": gain_color(_mean(float(loc["gain_sum"]), n)),
                "properties": _node_props(loc, "Local"),
            }
        )
        rels.append(
            {
                "id": f"REFINES:{loc['key']}",
                "source": f"Local:{loc['key']}",
                "target": f"Global:{loc['global_key']}",
                "color": REFINES_COLOR,
                "width": 1.0,
            }
        )
    rels.extend(_transition(t) for t in data.transitions)
    return nodes, rels


def _transition(t: dict[str, Any]) -> dict[str, Any]:
    props = {"type": "TRANSITION", **{k: v for k, v in t.items() if v is not None}}
    if t["prior"]:
        caption, color, width = "prior", PRIOR_COLOR, 1.0
    else:
        n = int(t["count"])
        mean = float(t["gain_sum"]) / n
        caption = f"{t['gpu_arch']} n={n} {mean:+.2f}"
        color, width = gain_color(mean), 1.5 + 1.5 * math.log2(n)
        props["mean_gain"] = mean
    return {
        "id": f"TRANSITION:{t['src']}->{t['dst']}:{t['gpu_arch']}",
        "source": f"Global:{t['src']}",
        "target": f"Global:{t['dst']}",
        "caption": caption,
        "color": color,
        "width": width,
        "properties": props,
    }


def build_graph(data: ViewData) -> Any:
    """The neo4j-viz VisualizationGraph of `data` (imported here: neo4j-viz is an optional dependency)."""
    try:
        from neo4j_viz import Node, Relationship, VisualizationGraph
    except ImportError as e:
        raise ViewError("memory view needs neo4j-viz: pip install 'htam-graph[viz]'") from e
    nodes, rels = graph_entities(data)
    return VisualizationGraph(
        nodes=[Node.model_validate(n) for n in nodes],
        relationships=[Relationship.model_validate(r) for r in rels],
    )


def render_html(data: ViewData, height: str = "900px") -> str:
    """The view as one self-contained HTML page (neo4j-viz inlines its scripts and styles)."""
    graph = build_graph(data)
    page: str = graph.render(height=height, show_search_button=True, show_layout_button=True).data
    title = "htam-graph memory" + (f": around {data.focus}" if data.focus else "")
    page = page.replace("<title>neo4j-viz</title>", f"<title>{html.escape(title)}</title>", 1)
    return page


def write_view(store: GraphStore, path: Path, focus: str | None = None, min_count: int = 1) -> ViewData:
    """Fetch and render the view into `path`; return what was drawn."""
    data = fetch_view(store, focus, min_count)
    page = render_html(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return data


@click.command("view")
@click.option("--html", "html_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--focus", default=None, metavar="DIRECTION", help="Only this direction, its strategies and transitions."
)
@click.option(
    "--min-count",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="Hide evidence transitions observed fewer times (seed priors stay, drawn grey).",
)
@click.pass_context
def view_cmd(ctx: click.Context, html_path: Path, focus: str | None, min_count: int) -> None:
    """Write an interactive HTML view of the HTG memory (open it in a browser)."""
    from htam_graph.store import store_session

    with store_session(ctx.obj) as store:
        data = write_view(store, html_path, focus, min_count)
    evidence = sum(1 for t in data.transitions if not t["prior"])
    click.echo(
        f"wrote {html_path}: {len(data.globals_)} directions, {len(data.locals_)} strategies, "
        f"{evidence} evidence transitions, {len(data.transitions) - evidence} seed priors"
    )
