"""Import a generated candidate source as a module, from a real file: shared by the rules interpreter tests.

@triton.jit reads a kernel's source from the file its function was defined in, so a candidate cannot be run
from a string: it is written under a folder of the test and imported from there.

Loaded by path (`runpy.run_path(str(Path(__file__).with_name("candidate_import.py")))["import_candidate"]`),
like interp_child.py and fake_llm_server.py: pytest runs with --import-mode=importlib, and the checks that call
it often run in a child process (interp_child.py) where no conftest fixture exists. It is not assertion-
rewritten by pytest, so every assert here carries its own message.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def import_candidate(source: str, directory: Path) -> ModuleType:
    """`source` written to `directory/candidate_<hash>.py` and imported as a fresh module.

    The name comes from a hash of the source, so different candidates never share a file or a module name.
    The module is registered in sys.modules only while it executes (dataclasses and typing resolve their
    module there) and removed afterwards, so no test sees a candidate another one imported.
    """
    name = f"candidate_{abs(hash(source)) % 10**12}"
    path = directory / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"no import spec for {path}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module
