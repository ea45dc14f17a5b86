"""The tree stays lint-clean, formatted (ruff) and type-checked (mypy --strict), all configured in
pyproject.toml, so style or type drift fails CI."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from htam_graph.kernels_runtime.static_checks import dotted_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff(args: list[str]) -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    if ruff is None:
        pytest.fail("ruff is not installed: it is part of the dev extra")
    done = subprocess.run([ruff, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def _package_tree(src: Path) -> None:
    """`src/htam_graph` as the installed package sees it: htam_graph/ plus the user's top-level folders that
    setuptools' package-dir maps into it (cli, importers, kernels_runtime, cypher), as symlinks. mypy cannot
    follow the editable install's import hook; run on the folders themselves it would name them `cli.*`,
    `kernels_runtime.*` and leave every `htam_graph.cli` / `htam_graph.kernels_runtime` import unresolved (Any)."""
    shutil.rmtree(src, ignore_errors=True)
    package = src / "htam_graph"
    package.mkdir(parents=True)
    for entry in (ROOT / "htam_graph").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for folder in ("cli", "importers", "kernels_runtime", "cypher"):
        (package / folder).symlink_to(ROOT / folder)


def test_mypy_strict() -> None:
    """`mypy --strict` (configured in pyproject.toml) over the whole installed namespace: htam_graph, cli,
    importers, kernels_runtime. The cache persists under .htam-test/ (a cold run takes minutes: it reads torch's
    annotations; a warm one seconds)."""
    work = ROOT / ".htam-test" / "mypy"
    src = work / "src"
    _package_tree(src)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(work / "cache"), "-p", "htam_graph"],
        cwd=src, env={**os.environ, "MYPYPATH": str(src)}, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    checked = int(done.stdout.rsplit(" in ", 1)[1].split()[0])  # "Success: no issues found in N source files"
    assert checked > 150, done.stdout


def _names_used(folder: Path) -> set[str]:
    """Every module the Python files under `folder` import (`from m import x` also gives `m.x`) and every
    attribute chain they write on an imported module (`torch._dynamo.reset` after `import torch`), so a library
    module reached as an attribute counts."""
    names: set[str] = set()
    for path in folder.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound: dict[str, str] = {}  # local name -> module
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
                for alias in node.names:
                    root = alias.name.split(".")[0]
                    bound[alias.asname or root] = alias.name if alias.asname else root
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        for node in ast.walk(tree):
            dotted = dotted_name(node) if isinstance(node, ast.Attribute) else None
            if dotted and dotted.split(".")[0] in bound:
                head, _, rest = dotted.partition(".")
                names.add(f"{bound[head]}.{rest}")
    return names


def test_mypy_skips_no_module_the_project_uses() -> None:
    """pyproject's `follow_imports = "skip"` list is for library modules only other libraries reach: a project
    module importing one of them, or naming it as an attribute (`torch._dynamo.reset()`), would get Any from it
    and lose its type checks."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    skipped = {
        name.removesuffix(".*")
        for override in config["tool"]["mypy"].get("overrides", [])
        if override.get("follow_imports") == "skip"
        for name in override["module"]
    }
    assert skipped, "no skip list: update this test with the configuration"
    used = set().union(
        *(_names_used(ROOT / f) for f in ("htam_graph", "cli", "importers", "kernels_runtime"))
    )
    assert {"torch", "torch.fx.GraphModule", "pydantic", "openai.types.chat"} <= used  # the scan sees them
    hit = sorted(n for n in used for s in skipped if n == s or n.startswith(s + "."))
    assert hit == []
