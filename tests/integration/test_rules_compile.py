"""Every kernel a recipe writes compiles with the real Triton compiler for an H100/H200 (sm_90), no GPU needed.

The interpreter tests check the numbers; this checks what the interpreter cannot: that the kernels pass the
Triton front end (static `if` on constexprs, int64 offsets, reductions, helpers) and lower to PTX and a cubin.
"""

from __future__ import annotations

import ast
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from htam_graph.model import Task
from htam_graph.rules import KernelConfig
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

import_candidate = runpy.run_path(str(Path(__file__).with_name("candidate_import.py")))["import_candidate"]
KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
CASES = [
    ("level1/88_MinGPTNewGelu.py", "fusion.elementwise_chain", KernelConfig()),
    (
        "level1/20_LeakyReLU.py",
        "fusion.elementwise_chain",
        KernelConfig(block=4096, num_warps=8, vector_hints=True),
    ),
    ("level2/16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling.py", "fusion.library_epilogue", KernelConfig()),
    (
        "level2/2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide.py",
        "fusion.library_epilogue",
        KernelConfig(),
    ),
    ("level1/24_LogSoftmax.py", "reduction_structure.row_softmax", KernelConfig(block=2048, num_warps=8)),
]


def _nvidia_target() -> Any:
    try:
        from triton.backends import backends
        from triton.backends.compiler import GPUTarget
    except ImportError:
        return None
    return GPUTarget("cuda", 90, 32) if "nvidia" in backends else None


def kernel_signature(fn_node: ast.FunctionDef, index_64: bool) -> tuple[dict[str, str], dict[str, object]]:
    """Argument types from the generated kernels' naming conventions (pointers end in _ptr, sizes are ints)."""
    signature: dict[str, str] = {}
    constexprs: dict[str, object] = {}
    for arg in fn_node.args.args:
        name = arg.arg
        if arg.annotation is not None:  # BLOCK / INDEX_64: tl.constexpr
            signature[name] = "constexpr"
            constexprs[name] = (
                index_64 if name == "INDEX_64" else (16384 if "row_kernel" in fn_node.name else 1024)
            )
        elif name.endswith("_ptr"):
            signature[name] = "*fp32"
        elif name in ("n_elements", "n_cols") or name.endswith(("_inner", "_size")):
            signature[name] = "i64" if index_64 and name == "n_elements" else "i32"
        else:
            signature[name] = "fp32"  # scalars read from module attributes
    return signature, constexprs


# triton.compile cannot run in a process where TRITON_INTERPRET=1 (the CI sets it for the interpreter tests):
# there, the compile tests run in a child process without it.
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@pytest.mark.skipif(not _INTERPRETED, reason="the compile tests run in this process")
def test_compile_tests_in_a_child_without_the_interpreter() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--import-mode=importlib", __file__],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert f"{len(CASES)} passed" in res.stdout, res.stdout[-2000:]


@pytest.mark.skipif(_INTERPRETED, reason="run by test_compile_tests_in_a_child_without_the_interpreter")
@pytest.mark.parametrize(("rel", "key", "config"), CASES, ids=[c[0].split("/")[1][:-3] for c in CASES])
def test_generated_kernels_compile_for_sm90(
    rel: str, key: str, config: KernelConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = _nvidia_target()
    if target is None:
        pytest.skip("this triton has no NVIDIA backend")
    import triton
    from triton.compiler import ASTSource

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when it is unset
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    source = (KB / rel).read_text(encoding="utf-8")
    task = Task(key=rel, suite="kernelbench", level=None, name=rel, source=source, source_sha256="0" * 64)
    generated = default_recipes()[key].emit(task_view(task), config)
    module = import_candidate(generated, tmp_path)
    kernels = [
        node
        for node in ast.parse(generated).body
        if isinstance(node, ast.FunctionDef) and node.name.endswith("_kernel")
    ]
    assert kernels
    for node in kernels:
        for index_64 in (False, True) if any(a.arg == "INDEX_64" for a in node.args.args) else (False,):
            signature, constexprs = kernel_signature(node, index_64)
            compiled = triton.compile(
                ASTSource(fn=getattr(module, node.name), signature=signature, constexprs=constexprs),
                target=target,
            )
            assert ".entry " + node.name in compiled.asm["ptx"]
            assert len(compiled.asm["cubin"]) > 0
