"""Run a function of a test module in a fresh Python process with TRITON_INTERPRET=1 set before any import.

Triton reads TRITON_INTERPRET when it is first imported, and some interpreted kernels (tl.reduce) only work in a
process where it was set before that. The rules interpreter tests therefore run their checks in a child: the test
module is loaded there by path, `function(**kwargs)` is called, and its JSON-able result comes back on the last
line of stdout. A child that fails (an assertion in the check, a crash) fails the calling test with the tail of
the child's stderr.

Loaded by path (`Path(__file__).with_name("interp_child.py")`), like fake_llm_server.py: it is not assertion-
rewritten by pytest, so every assert here carries its own message.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

STDERR_TAIL = 3000  # characters of the child's stderr shown when it fails
TIMEOUT_S = 600


def child_code(module_file: str | Path, function: str) -> str:
    """The `python -c` program: load `module_file`, call `function` with the kwargs of the JSON file argv[1]
    (`directory` as a Path) and print its result as JSON."""
    return (
        "import importlib.util, json, sys\n"
        "from pathlib import Path\n"
        f"spec = importlib.util.spec_from_file_location({Path(module_file).stem + '_child'!r}, "
        f"{str(module_file)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "kwargs = json.loads(open(sys.argv[1], encoding='utf-8').read())\n"
        "kwargs['directory'] = Path(kwargs['directory'])\n"
        f"print(json.dumps(getattr(module, {function!r})(**kwargs)))\n"
    )


def run_isolated(
    module_file: str | Path,
    function: str,
    kwargs: dict[str, Any],
    *,
    runtime_warnings_are_errors: bool = False,
) -> Any:
    """`function(**kwargs)` of the module at `module_file`, called in a fresh process with TRITON_INTERPRET=1.

    kwargs must hold `directory` (a folder of the test, e.g. tmp_path): the arguments are written there as JSON
    and the child receives it as a Path; the other values must be JSON-able. runtime_warnings_are_errors runs
    the child with `-W error::RuntimeWarning`. Returns the function's result decoded from JSON.
    """
    directory = Path(kwargs["directory"])
    args = directory / "isolated_args.json"
    args.write_text(json.dumps({**kwargs, "directory": str(directory)}), encoding="utf-8")
    warning_flags = ["-W", "error::RuntimeWarning"] if runtime_warnings_are_errors else []
    done = subprocess.run(
        [sys.executable, *warning_flags, "-c", child_code(module_file, function), str(args)],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-STDERR_TAIL:]
    return json.loads(done.stdout.strip().splitlines()[-1])
