"""Run a function of a test module in a Python process that had TRITON_INTERPRET=1 set before any import.

Triton reads TRITON_INTERPRET when it is first imported, and some interpreted kernels (tl.reduce) only work in a
process where it was set before that. When the test process itself started with TRITON_INTERPRET=1 (as
scripts/test.sh runs the suite), that holds here already and the function is called in this process: the test
module is loaded by path once per process, the arguments and the result go through JSON as they would to a
child, and an exception fails the calling test as an AssertionError naming it. Otherwise (pytest started without
it) the check runs in a child: the module is loaded there by path, `function(**kwargs)` is called, and its
JSON-able result comes back on the last line of stdout; a child that fails (an assertion in the check, a crash)
fails the calling test with the tail of the child's stderr. A child costs a Python start-up with torch and
Triton imports (seconds per check), which is why it is not the default.

Loaded by path (`Path(__file__).with_name("interp_child.py")`), like fake_llm_server.py: it is not assertion-
rewritten by pytest, so every assert here carries its own message.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType
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


def run_compile_child(module_file: str | Path, function: str, kwargs: dict[str, Any]) -> Any:
    """`function(**kwargs)` of the module at `module_file` in a child without TRITON_INTERPRET (triton.compile
    cannot run under it), Triton's cache in `directory`/cache; kwargs as for `run_isolated`."""
    directory = Path(kwargs["directory"])
    args = directory / "compile_args.json"
    args.write_text(json.dumps({**kwargs, "directory": str(directory)}), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env |= {"TRITON_DEFAULT_FP_FUSION": "1", "TRITON_CACHE_DIR": str(directory / "cache")}
    return _child_result(module_file, function, args, env, [])


def _child_result(
    module_file: str | Path, function: str, args: Path, env: dict[str, str], flags: list[str]
) -> Any:
    """Run `child_code` in a fresh Python with `env` and interpreter `flags`; its JSON result, or an
    AssertionError with the tail of its stderr when it fails."""
    done = subprocess.run(
        [sys.executable, *flags, "-c", child_code(module_file, function), str(args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-STDERR_TAIL:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def interpreter_on_since_start() -> bool:
    """Whether this process was started with TRITON_INTERPRET=1 (its initial environment, /proc/self/environ)
    and still has it: then Triton, whenever it was imported here, was imported with the interpreter on."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    try:
        initial = Path("/proc/self/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"TRITON_INTERPRET=1" in initial


def _loaded(module_file: str | Path) -> ModuleType:
    """The module at `module_file`, loaded by path once per process (registered under a name of its own)."""
    path = Path(module_file).resolve()
    name = f"{path.stem}_interp_in_process_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, module_file)
        assert spec is not None and spec.loader is not None, f"no import spec for {module_file}"
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


def _call_in_process(
    module_file: str | Path, function: str, args: Path, runtime_warnings_are_errors: bool
) -> Any:
    """What the child would do, here: load, call with the JSON arguments, return the result through JSON."""
    kwargs = json.loads(args.read_text(encoding="utf-8"))
    kwargs["directory"] = Path(kwargs["directory"])
    with warnings.catch_warnings():
        warnings.resetwarnings()  # a child's filters, not pytest's "error" for every warning
        if runtime_warnings_are_errors:
            warnings.simplefilter("error", RuntimeWarning)
        try:
            result = getattr(_loaded(module_file), function)(**kwargs)
        except Exception as e:  # noqa: BLE001 - a failing check fails the caller, as a failing child does
            raise AssertionError(f"{function} raised {type(e).__name__}: {e}") from e
    return json.loads(json.dumps(result))


def run_isolated(
    module_file: str | Path,
    function: str,
    kwargs: dict[str, Any],
    *,
    runtime_warnings_are_errors: bool = False,
    in_process: bool | None = None,
) -> Any:
    """`function(**kwargs)` of the module at `module_file`, called where TRITON_INTERPRET=1 was set from the start.

    kwargs must hold `directory` (a folder of the test, e.g. tmp_path): the arguments are written there as JSON
    and the function receives it as a Path; the other values must be JSON-able. runtime_warnings_are_errors
    turns RuntimeWarnings into errors (`-W error::RuntimeWarning` in a child). in_process: None calls the
    function in this process when `interpreter_on_since_start()`, else in a fresh child; True or False forces
    one way. Returns the function's result decoded from JSON.
    """
    directory = Path(kwargs["directory"])
    args = directory / "isolated_args.json"
    args.write_text(json.dumps({**kwargs, "directory": str(directory)}), encoding="utf-8")
    if in_process is None:
        in_process = interpreter_on_since_start()
    if in_process:
        return _call_in_process(module_file, function, args, runtime_warnings_are_errors)
    warning_flags = ["-W", "error::RuntimeWarning"] if runtime_warnings_are_errors else []
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return _child_result(module_file, function, args, env, warning_flags)
