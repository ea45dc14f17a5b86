"""Fixtures of the GPU tests, and the import of their shared scaffolding.

`rules_gpu_support.py` (beside this file) is loaded here by path and registered as
`tests.gpu.rules_gpu_support`, so that the test files can write `from tests.gpu.rules_gpu_support import ...`
under `--import-mode=importlib` whatever the pytest version (recent pytest versions also resolve that name
themselves; older ones only create placeholder `tests` / `tests.gpu` modules that cannot import a submodule).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

SUPPORT = "tests.gpu.rules_gpu_support"


def _load_support() -> ModuleType:
    if SUPPORT in sys.modules:
        return sys.modules[SUPPORT]
    spec = importlib.util.spec_from_file_location(SUPPORT, Path(__file__).with_name("rules_gpu_support.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[SUPPORT] = module
    spec.loader.exec_module(module)
    return module


support = _load_support()


@pytest.fixture
def fp32_strict_cuda() -> Iterator[None]:
    """TF32 off for the test (cuBLAS and cuDNN), switches restored and the CUDA cache emptied after it."""
    with support.fp32_strict():
        yield
    torch.cuda.empty_cache()
