"""Load a helper module that lives next to a test file, by path, as a real module registered in sys.modules.

pytest runs with --import-mode=importlib, so tests/integration is not a package and its helper files cannot be
imported by name. A test loads this file by path and then the helper it needs:

    load_sibling = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]
    fls = load_sibling("fake_llm_server")

The module is registered under its name (once), so dataclasses, pickling and child processes that import it by
name see the same module object.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_sibling(name: str) -> ModuleType:
    """tests/integration/<name>.py as a module (the one already loaded under that name, if any)."""
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
