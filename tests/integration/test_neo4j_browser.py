"""Neo4j Browser itself, driven by headless Chromium: the memory of a real recorded bank loaded into Neo4j, the
style docs/neo4j/htam.grass applied with `:style`, every query of docs/neo4j/browser_guide.md run in the
Browser (each table holds as many rows as the driver returns for that query), and a screenshot of the learned
transitions drawn with the style's colours and captions.

Needs the Browser's URL (HTAM_NEO4J_HTTP_URL, set by scripts/neo4j-test-server), Debian's Chromium and
Python's playwright (the `dev` extra) driving it; playwright's own browser download is never used. The
screenshot goes to tmp_path, or to the path in HTAM_BROWSER_SCREENSHOT (docs/neo4j/browser_transitions.png is
made so).
"""

from __future__ import annotations

import os
import re
import runpy
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from htam_graph import bank

HERE = Path(__file__).resolve().parent
GRASS = HERE.parents[1] / "docs" / "neo4j" / "htam.grass"
# the memory of a 100-task benchmark on an H200 (results/h200/NOTES.md, section 4): 179 attempts, 32 runs
RECORDED_BANK = HERE.parent / "data" / "h200_memory_bank" / "htam_bank.jsonl.gz"
TASK = "kernelbench/level1/88_MinGPTNewGelu"  # the bank's task with the most attempts
neo4j_guide = runpy.run_path(str(HERE / "sibling_module.py"))["load_sibling"]("neo4j_guide")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
FRAME = "[data-testid=frame]"
NEO4J_ERROR = r"Neo\.\w+Error\.\w+"
WAIT_MS = 180_000  # generous: the test machines are small and shared
# the style's colours for Global nodes and TRANSITION relationships (docs/neo4j/htam.grass)
GLOBAL_FILL, TRANSITION_FILL = "#4C8EDA", "#2870C2"


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: scripts/test.sh installs what this test needs)")
    pytest.skip(reason)


@pytest.fixture
def page(neo4j_server: Any) -> Iterator[Any]:
    """A Chromium page on Neo4j Browser, connected to the test server as neo4j."""
    if not neo4j_server.http_url:
        _missing("HTAM_NEO4J_HTTP_URL is not set: where Neo4j Browser is served is unknown")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        _missing("no chromium on PATH")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
        context = browser.new_context(
            viewport={"width": 1600, "height": 1000}, permissions=["clipboard-read", "clipboard-write"]
        )
        context.set_default_timeout(WAIT_MS)
        tab = context.new_page()
        tab.goto(neo4j_server.http_url + "browser/")
        tab.get_by_test_id("bolt-scheme-select").select_option("bolt://")
        tab.get_by_test_id("boltaddress").fill(neo4j_server.uri.split("://", 1)[1])
        tab.get_by_test_id("username").fill(neo4j_server.username)
        tab.get_by_test_id("password").fill(neo4j_server.password)
        tab.get_by_test_id("connect").click()
        tab.get_by_text(f"You are connected as user {neo4j_server.username}").wait_for()
        try:
            yield tab
        finally:
            browser.close()


def run(page: Any, command: str) -> Any:
    """Paste `command` into the Browser's editor (as a user pastes: typing would auto-close brackets), run it,
    and return its result frame, once finished."""
    # the newest frame is on top; the Browser drops old ones past its maxFrames, so frames are not counted
    page.evaluate(f"() => document.querySelectorAll({FRAME!r}).forEach(f => f.dataset.htamSeen = '1')")
    page.get_by_test_id("activeEditor").click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.evaluate("text => navigator.clipboard.writeText(text)", command)
    page.keyboard.press("Control+V")
    page.get_by_test_id("editor-Run").click()
    page.wait_for_function(
        f"() => {{ const f = document.querySelector({FRAME!r}); return f && !f.dataset.htamSeen; }}"
    )
    frame = page.get_by_test_id("frame").first
    shown = " ".join(frame.get_by_test_id("frameCommand").inner_text().split())
    assert shown == " ".join(command.split()), f"the Browser ran {shown!r}"
    return frame


def finished(frame: Any, picture: bool = False) -> str:
    """The text of a Cypher frame once its result is in (a table's "Started streaming N records", a graph's
    "Displaying N nodes, M relationships"); fails on a Neo4j error."""
    done = r"Displaying \d+ nodes" if picture else r"Started streaming \d+ record"
    try:
        frame.filter(has_text=re.compile(rf"{done}|{NEO4J_ERROR}")).wait_for()
    except Exception as e:  # playwright's TimeoutError: say what the frame shows instead
        raise AssertionError(f"no result in the frame: {frame.inner_text()[:2000]!r}") from e
    text = " ".join(frame.inner_text().split())
    assert not re.search(NEO4J_ERROR, text), text
    return text


def records(frame: Any) -> int:
    return int(re.findall(r"Started streaming (\d+) record", finished(frame))[-1])


@pytest.mark.neo4j
def test_browser_runs_the_guide_styled_by_htam_grass(page: Any, neo4j_store: Any, tmp_path: Path) -> None:
    counts = bank.import_bank(neo4j_store, RECORDED_BANK)
    assert counts.attempts_new == 179

    grass = GRASS.read_text(encoding="utf-8")
    run(page, ":style reset")
    run(page, f":style {grass}")
    style = run(page, ":style").inner_text()
    for selector in re.findall(r"^(\S+) \{$", grass, re.M):  # the Browser now holds every rule of the file
        assert f"\n{selector} {{" in f"\n{style}", f"{selector} missing from the Browser's style:\n{style}"
    assert TRANSITION_FILL in style and GLOBAL_FILL in style

    params_block, params, queries = neo4j_guide.guide()
    run(page, params_block)
    run(page, f":param task => '{TASK}'")  # the guide's example task is not in this bank
    params["task"] = TASK
    for query in queries:
        frame = run(page, query)
        if neo4j_guide.is_picture(query):
            assert re.search(r"Displaying [1-9]\d* nodes", finished(frame, picture=True))
            continue
        expected = len(neo4j_store.run_text(query, neo4j_guide.used_params(query, params)))
        assert expected > 0, f"no answer in this bank to:\n{query}"
        assert records(frame) == expected, query

    learned = next(q for q in queries if "RETURN a, t, b" in q)
    edges = neo4j_store.run_text(learned.replace("RETURN a, t, b", "RETURN count(t) AS n"))[0]["n"]
    run(page, ":config autoComplete: false")  # only the learned edges, not the seed's priors
    frame = run(page, learned)
    shown = finished(frame, picture=True)
    assert re.search(rf"Displaying \d+ nodes, {edges} relationships", shown), shown
    page.wait_for_timeout(8000)  # let the force layout settle
    nodes = int(re.findall(r"Displaying (\d+) nodes", shown)[-1])
    graph = frame.locator("svg.neod3viz")  # the Browser's graph view (the other svgs are icons)
    fills = graph.locator("circle.b-outline").evaluate_all("els => els.map(e => e.getAttribute('fill'))")
    assert fills == [GLOBAL_FILL] * nodes, fills  # every node a Global, in the style's colour
    arrows = graph.locator("path.b-outline").evaluate_all("els => els.map(e => e.getAttribute('fill'))")
    assert arrows == [TRANSITION_FILL] * edges, arrows  # every learned TRANSITION, in the style's blue
    captions = graph.locator("text").evaluate_all("els => els.map(e => e.textContent)")
    assert any(re.fullmatch(r"sm_90 n=[1-9]\d*", c) for c in captions), captions  # '{gpu_arch} n={count}'

    target = Path(os.environ.get("HTAM_BROWSER_SCREENSHOT") or tmp_path / "browser_transitions.png")
    frame.get_by_title("Fullscreen", exact=True).click()  # the graph frame alone, over the whole window
    for _ in range(2):  # the force layout leaves the graph small in the middle: zoom to read the captions
        frame.get_by_label("zoom-in", exact=True).click()
    page.wait_for_timeout(3000)
    page.screenshot(path=str(target))
    assert target.stat().st_size > 20_000
