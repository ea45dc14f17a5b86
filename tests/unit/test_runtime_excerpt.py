"""Error excerpts name lines of the candidate file (which the prompt shows) and the library frame the error was
raised in, also when a wrapper re-raises it, and map a Triton compilation error's kernel-relative line."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from htam_graph.kernels_runtime.worker.excerpt import exception_excerpt, triton_location

CANDIDATE = """import helper_lib


def inner(x):
    return helper_lib.check(x)


def outer(x):
    try:
        return inner(x)
    except ValueError as e:
        raise RuntimeError("wrapped by the runtime") from e
"""
HELPER = """def check(x):
    if x < 0:
        raise ValueError("negative input")
    return x
"""


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_candidate_frames_of_the_cause_and_the_innermost_library_frame_are_kept(tmp_path: Path) -> None:
    lib = tmp_path / "site-packages" / "helper_lib.py"
    lib.parent.mkdir()
    lib.write_text(HELPER)
    _load(lib, "helper_lib")
    cand = tmp_path / "candidate_0123456789abcdef.py"
    cand.write_text(CANDIDATE)
    module = _load(cand, "cand_mod")
    try:
        module.outer(-1)
    except RuntimeError as e:
        text = exception_excerpt(e, str(cand))
    assert "candidate_0123456789abcdef.py:12 in outer" in text  # where the wrapper re-raised
    assert "candidate_0123456789abcdef.py:5 in inner: return helper_lib.check(x)" in text  # from the cause
    assert "(raised in helper_lib.py:3 in check)" in text
    assert text.rstrip().endswith("RuntimeError: wrapped by the runtime")


class _FakeCompilationError(Exception):
    """The attributes Triton's CompilationError carries: the kernel source from `def`, and the AST node."""

    def __init__(self, src: str, lineno: int) -> None:
        super().__init__(f"at {lineno}:4:")
        self.src = src
        self.node = ast.parse("x").body[0]
        self.node.lineno = lineno


def test_a_triton_compile_error_line_is_mapped_into_the_candidate_file(tmp_path: Path) -> None:
    source = "import triton\n\n\n@triton.jit\ndef k(x_ptr, n):\n    pid = 0\n    y = tl.exp(pid, 3)\n"
    cand = tmp_path / "candidate_0123456789abcdef.py"
    cand.write_text(source)
    kernel_src = "def k(x_ptr, n):\n    pid = 0\n    y = tl.exp(pid, 3)\n"
    error = _FakeCompilationError(kernel_src, 3)  # line 3 of the kernel = line 7 of the file
    assert triton_location(error, str(cand)) == (
        "  Triton compile error at candidate_0123456789abcdef.py:7: y = tl.exp(pid, 3)\n"
    )
    assert triton_location(ValueError("x"), str(cand)) == ""
    assert triton_location(error, None) == ""
