"""The layer map of ARCHITECTURE.md is enforced, and importing the package does no work."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_import_linter_layers_hold(tmp_path: Path) -> None:
    """import-linter reads packages from the file system, and our user's layout maps `cli/` → `htam_graph.cli`
    through setuptools' package-dir, so the contract is checked on a real (non-editable) install of the tree."""
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.fail("lint-imports (import-linter) is not installed: it is part of the dev extra")
    site = tmp_path / "site"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-compile",
            "--target",
            str(site),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(site)}
    res = subprocess.run(
        [lint, "--config", str(ROOT / ".importlinter")], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken" in res.stdout


def test_importing_the_package_imports_no_torch_and_reads_nothing(tmp_path: Path) -> None:
    """Every module outside the runtime's worker process (kernels_runtime/worker/) imports without
    torch/triton/drivers and without touching HTAM_HOME: the evaluator's side of the runtime included."""
    home = tmp_path / "home-must-not-appear"
    code = (
        "import importlib, pkgutil, sys\n"
        "import htam_graph\n"
        "skip = ('htam_graph.kernels_runtime.worker',)\n"
        "names = ['htam_graph.cli', 'htam_graph.importers', 'htam_graph.cypher']\n"
        "for root in ['htam_graph', 'htam_graph.cli', 'htam_graph.importers', 'htam_graph.store',"
        " 'htam_graph.llm', 'htam_graph.rules', 'htam_graph.kernels_runtime']:\n"
        "    mod = importlib.import_module(root)\n"
        "    for info in pkgutil.walk_packages(mod.__path__, root + '.'):\n"
        "        if not info.name.startswith(skip):\n"
        "            names.append(info.name)\n"
        "for n in names:\n"
        "    importlib.import_module(n)\n"
        "heavy = sorted(m for m in ('torch', 'triton', 'neo4j', 'falkordb', 'anthropic', 'openai', 'ray',"
        " 'matplotlib', 'pandas') if m in sys.modules)\n"
        "print(len(names), heavy)\n"
    )
    env = {**os.environ, "HTAM_HOME": str(home)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    count, heavy = res.stdout.strip().split(" ", 1)
    assert int(count) > 30
    assert heavy == "[]", f"imported at module level: {heavy}"
    assert not home.exists()
