"""tests/integration/interp_child.py, the runner of the rules interpreter tests: in a child process, or in this
one when it started with TRITON_INTERPRET=1.

Each case runs a tiny module written to tmp_path (no torch, no triton), so a child costs one Python start-up.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

INTERP_CHILD = Path(__file__).with_name("interp_child.py")
run_isolated = runpy.run_path(str(INTERP_CHILD))["run_isolated"]

TARGET = """
import os
import sys
import warnings
from pathlib import Path


def report(directory, value):
    return {
        "interpret": os.environ.get("TRITON_INTERPRET"),
        "directory_is_path": isinstance(directory, Path),
        "directory": str(directory),
        "value": value,
        "triton_imported": "triton" in sys.modules,
    }


def fail(directory):
    raise ValueError("marker from the child's stderr")


def warn(directory):
    warnings.warn("a runtime warning", RuntimeWarning)
    return "warned"
"""


@pytest.fixture
def target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the child must get it whatever the parent has
    path = tmp_path / "target_module.py"
    path.write_text(TARGET, encoding="utf-8")
    return path


def test_calls_the_function_in_a_child_with_the_interpreter_on(target: Path, tmp_path: Path) -> None:
    result: dict[str, Any] = run_isolated(target, "report", {"directory": tmp_path, "value": [1, "a"]})
    assert result == {
        "interpret": "1",
        "directory_is_path": True,
        "directory": str(tmp_path),
        "value": [1, "a"],
        "triton_imported": False,
    }
    assert (tmp_path / "isolated_args.json").is_file()


def test_a_failing_child_fails_with_its_stderr(target: Path, tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="marker from the child's stderr"):
        run_isolated(target, "fail", {"directory": tmp_path})


def test_runtime_warnings_are_errors_only_when_asked(target: Path, tmp_path: Path) -> None:
    assert run_isolated(target, "warn", {"directory": tmp_path}) == "warned"
    with pytest.raises(AssertionError, match="RuntimeWarning: a runtime warning"):
        run_isolated(target, "warn", {"directory": tmp_path}, runtime_warnings_are_errors=True)


def test_in_process_calls_keep_the_child_contract(target: Path, tmp_path: Path) -> None:
    result: dict[str, Any] = run_isolated(
        target, "report", {"directory": tmp_path, "value": [1, "a"]}, in_process=True
    )
    assert (result["directory_is_path"], result["directory"], result["value"]) == (
        True,
        str(tmp_path),
        [1, "a"],
    )
    with pytest.raises(AssertionError, match="fail raised ValueError: marker from the child's stderr"):
        run_isolated(target, "fail", {"directory": tmp_path}, in_process=True)
    # pytest's own filter turns every warning into an error; the call gets a child's filters instead
    assert run_isolated(target, "warn", {"directory": tmp_path}, in_process=True) == "warned"
    with pytest.raises(AssertionError, match="RuntimeWarning: a runtime warning"):
        run_isolated(
            target, "warn", {"directory": tmp_path}, runtime_warnings_are_errors=True, in_process=True
        )


@pytest.mark.parametrize(("started_with", "expected"), [({"TRITON_INTERPRET": "1"}, "True"), ({}, "False")])
def test_in_process_only_when_the_process_started_with_the_interpreter(
    started_with: dict[str, str], expected: str
) -> None:
    # Setting the variable after start-up is not enough: Triton may have been imported before.
    code = (
        "import os, runpy, sys\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        "print(runpy.run_path(sys.argv[1])['interpreter_on_since_start']())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | started_with
    done = subprocess.run(
        [sys.executable, "-c", code, str(INTERP_CHILD)], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == expected
