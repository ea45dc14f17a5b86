"""`htam-graph tasks import|list` through click, on the session's embedded FalkorDB."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from htam_graph.cli.main import _register, cli
from htam_graph.settings import Settings

GOOD = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.rand(2, 8)]

def get_init_inputs():
    return []
"""


@pytest.fixture(scope="module", autouse=True)
def _commands() -> None:
    _register()


def _invoke(settings: Settings, *args: str) -> tuple[int, str, str]:
    runner = CliRunner()
    result = runner.invoke(
        cli,
        ["--home", str(settings.htam_home), *args],
        env={"HTAM_GRAPH_NAME": settings.graph_name, "NEO4J_URI": ""},
    )
    return result.exit_code, result.stdout, result.stderr


def _checkout(root: Path) -> Path:
    (root / "suite" / "level1").mkdir(parents=True)
    (root / "suite" / "level1" / "1_ReLU.py").write_text(GOOD, encoding="utf-8")
    (root / "suite" / "level1" / "2_Broken.py").write_text("def f(:\n", encoding="utf-8")
    (root / "suite" / "level2").mkdir()
    (root / "suite" / "level2" / "3_NoInputs.py").write_text(
        GOOD.replace("def get_inputs", "def other"), encoding="utf-8"
    )
    return root


def test_import_then_reimport_then_list(htam_settings: Settings, tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    code, out, _ = _invoke(htam_settings, "tasks", "import", str(root))
    assert code == 0, out
    assert out.splitlines()[0] == "imported 1, updated 0, unchanged 0, skipped 2"
    assert "skipped suite/level1/2_Broken.py: syntax error at line 1" in out
    assert "skipped suite/level2/3_NoInputs.py: missing function get_inputs" in out

    code, out, _ = _invoke(htam_settings, "tasks", "import", str(root), "--json")
    assert code == 0
    report = json.loads(out)
    assert (report["imported"], report["updated"], report["unchanged"], len(report["skipped"])) == (
        0,
        0,
        1,
        2,
    )

    code, out, _ = _invoke(htam_settings, "tasks", "list")
    assert code == 0
    assert "suite/level1/1_ReLU" in out and "activation, elementwise" in out
    code, out, _ = _invoke(htam_settings, "tasks", "list", "--level", "1", "--json")
    rows = json.loads(out)
    assert [r["key"] for r in rows] == ["suite/level1/1_ReLU"] and rows[0]["level"] == 1
    code, out, _ = _invoke(htam_settings, "tasks", "list", "--level", "2")
    assert code == 0 and "no tasks imported at level 2" in out


def test_bad_paths_exit_1_with_one_line(htam_settings: Settings, tmp_path: Path) -> None:
    code, out, err = _invoke(htam_settings, "tasks", "import", str(tmp_path / "missing"))
    assert code == 1 and err.strip().count("\n") == 0 and "no such file or folder" in err
    code, out, err = _invoke(htam_settings, "tasks", "import", str(tmp_path))
    assert code == 1 and "no task files under" in err and "Traceback" not in out + err
