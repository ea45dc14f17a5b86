"""`htam-graph memory view`: what is read through the store (focus, min-count, priors kept apart), the page's
embedded data, the CLI, and the page drawn for real by headless Chromium (pixels of the node colours)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from htam_graph import memory
from htam_graph.cli.main import _register, cli
from htam_graph.cli.memview import PRIOR_COLOR, ViewData, fetch_view, gain_color, render_html
from htam_graph.model import AttemptRecord, GlobalDirection, LocalStrategy, SeedMemory, TransitionPrior
from htam_graph.settings import Settings
from htam_graph.store.falkordb_store import FalkorDBStore

_register()


def tiny_seed() -> SeedMemory:
    gl = [GlobalDirection(key=k, name=k.upper(), intent=f"do {k}") for k in ("ga", "gb", "gc")]
    lo = [
        LocalStrategy(key="ga.x", name="x", global_key="ga", languages=["triton"], pattern="p"),
        LocalStrategy(key="gb.y", name="y", global_key="gb", languages=["triton"], pattern="q"),
        LocalStrategy(key="gc.z", name="z", global_key="gc", languages=["triton"], pattern="r"),
    ]
    return SeedMemory(
        version=1, globals=gl, locals=lo, transitions=[TransitionPrior(src="ga", dst="gb", rationale="r")]
    )


def attempt(key: str, step: int, g: str, local: str, prev: str | None, gain: float) -> AttemptRecord:
    return AttemptRecord(
        key=key, run_key="r1", task_key="t1", step=step, global_key=g, local_key=local, prev_global_key=prev,
        status="improved" if gain > 0 else "correct", compiled=True, correct=True, gain=gain, gpu_arch="sm_90",
        created_ms=1000 + step,
    )  # fmt: skip


def fill(store: Any) -> None:
    """ga -> gb observed twice (gain +0.6 each), gb -> gc once (gain -0.6); gc.z never applied."""
    memory.seed_memory(store, tiny_seed())
    memory.record_attempts(
        store,
        [
            attempt("a1", 1, "ga", "ga.x", None, 0.3),
            attempt("a2", 2, "gb", "gb.y", "ga", 0.6),
            attempt("a3", 3, "gb", "gb.y", "ga", 0.6),
            attempt("a4", 4, "gc", "gc.z", "gb", -0.6),
        ],
    )


def edges(data: ViewData) -> set[tuple[str, str, str]]:
    return {(t["src"], t["dst"], t["gpu_arch"]) for t in data.transitions}


def test_fetch_view_filters(store: Any) -> None:
    fill(store)
    full = fetch_view(store)
    assert [g["key"] for g in full.globals_] == ["ga", "gb", "gc"]
    assert edges(full) == {("ga", "gb", "prior"), ("ga", "gb", "sm_90"), ("gb", "gc", "sm_90")}
    assert {loc["key"] for loc in full.locals_} == {"ga.x", "gb.y", "gc.z"}  # all three have evidence
    ga = next(g for g in full.globals_ if g["key"] == "ga")
    assert (ga["attempts"], ga["gain_sum"]) == (1, pytest.approx(0.3))
    strong = fetch_view(store, min_count=2)  # gb -> gc (count 1) hidden, the prior always kept
    assert edges(strong) == {("ga", "gb", "prior"), ("ga", "gb", "sm_90")}
    focus = fetch_view(store, focus="gc")
    assert [g["key"] for g in focus.globals_] == ["gb", "gc"] and edges(focus) == {("gb", "gc", "sm_90")}
    assert [loc["key"] for loc in focus.locals_] == ["gc.z"]


def view_data(html: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="neo4j-viz-data">(.*?)</script>', html, re.S)
    assert m, "neo4j-viz data block missing"
    return dict(json.loads(m.group(1)))


def test_page_data_sizes_colours_and_priors(store: Any) -> None:
    fill(store)
    data = view_data(render_html(fetch_view(store)))
    nodes = {n["id"]: n for n in data["nodes"]}
    assert set(nodes) == {"Global:ga", "Global:gb", "Global:gc", "Local:ga.x", "Local:gb.y", "Local:gc.z"}
    assert nodes["Global:gb"]["caption"] == "gb" and nodes["Local:gb.y"]["caption"] == "y"
    assert nodes["Global:gb"]["color"] == gain_color(0.6) and nodes["Global:gc"]["color"] == gain_color(-0.6)
    assert nodes["Global:gb"]["size"] > nodes["Global:ga"]["size"]  # 2 attempts vs 1
    rels = {r["id"]: r for r in data["relationships"]}
    prior, seen = rels["TRANSITION:ga->gb:prior"], rels["TRANSITION:ga->gb:sm_90"]
    assert prior["caption"] == "prior" and prior["color"] == PRIOR_COLOR
    assert seen["caption"] == "sm_90 n=2 +0.60" and seen["width"] > prior["width"]
    assert rels["REFINES:gc.z"]["to"] == "Global:gc"


def cli_invoke(settings: Settings, *args: str) -> Any:
    env = {"HTAM_GRAPH_NAME": settings.graph_name, "NEO4J_URI": None, "HTAM_CONFIG": None}
    return CliRunner().invoke(cli, ["--home", str(settings.htam_home), "memory", *args], env=env)


def test_cli_view_and_unknown_focus(htam_settings: Settings, embedded_server: Any, tmp_path: Path) -> None:
    store = FalkorDBStore(embedded_server.socket_path, htam_settings.graph_name)
    try:
        fill(store)
    finally:
        store.close()
    out = tmp_path / "view.html"
    result = cli_invoke(htam_settings, "view", "--html", str(out), "--min-count", "2")
    assert result.exit_code == 0, result.output
    assert "3 directions, 3 strategies, 1 evidence transitions, 1 seed priors" in result.output
    assert len(view_data(out.read_text(encoding="utf-8"))["relationships"]) == 2 + 3
    bad = cli_invoke(htam_settings, "view", "--html", str(out), "--focus", "nope")
    assert bad.exit_code == 1 and bad.output.strip() == "error: unknown direction 'nope' for --focus"


# ------------------------------------------------------------------------------------------------ browser
def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail("chromium is missing on CI: scripts/test.sh installs it (apt-get install chromium)")
    pytest.skip("chromium is not installed (apt-get install chromium); scripts/test.sh installs it")


def screenshot(page: Path, png: Path, wait_ms: int) -> None:
    """Load `page` in headless Chromium and screenshot it after `wait_ms` of real time (virtual time was
    measured to capture NVL's canvas before it drew, now and then)."""
    profile = png.parent / f"profile-{png.stem}"
    cmd = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--window-size=1200,900", f"--timeout={wait_ms}",
        f"--screenshot={png}", page.as_uri(),
    ]  # fmt: skip
    subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    assert png.exists(), "chromium wrote no screenshot"


def colour_pixels(png: Path, hex_colour: str, tolerance: int = 12) -> int:
    from PIL import Image

    target = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    image = Image.open(png).convert("RGB")
    return sum(
        n
        for n, rgb in image.getcolors(image.width * image.height) or []
        if all(abs(a - b) <= tolerance for a, b in zip(rgb, target, strict=True))
    )


def test_headless_chromium_draws_the_graph(store_factory: Any, tmp_path: Path) -> None:
    store = store_factory()
    fill(store)
    data = fetch_view(store)
    page, empty_page = tmp_path / "view.html", tmp_path / "empty.html"
    page.write_text(render_html(data), encoding="utf-8")
    empty_page.write_text(render_html(ViewData(data.globals_[:0], [], [], None, 1)), encoding="utf-8")
    green, red = gain_color(0.6), gain_color(-0.6)  # gb (and gb.y) are green, gc (and gc.z) red
    shot, empty_shot = tmp_path / "view.png", tmp_path / "empty.png"
    for wait_ms in (8000, 20000, 45000):  # a slow, shared CI machine gets longer looks
        screenshot(page, shot, wait_ms)
        if colour_pixels(shot, green) > 500 and colour_pixels(shot, red) > 500:
            break
    screenshot(empty_page, empty_shot, 4000)
    # A node of radius >= 18 px covers ~1000 px; the empty page (same UI chrome) has none of these colours.
    assert colour_pixels(shot, green) > 500, "the green direction node was not drawn"
    assert colour_pixels(shot, red) > 500, "the red direction node was not drawn"
    assert colour_pixels(empty_shot, green) < 50 and colour_pixels(empty_shot, red) < 50
