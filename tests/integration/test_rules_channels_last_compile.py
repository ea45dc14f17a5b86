"""The channels-last layout kernels compile with the real Triton compiler for sm_90 (H100/H200), no GPU needed.

What the interpreter cannot check: the kernels pass the Triton front end for both layouts and both index
widths, and, with the divisibility Triton specialises on at run time (channels and spatial sizes multiples of
16, aligned pointers), the channels-last variant moves its tile through shared memory between 128-bit global
loads along the channels and 128-bit global stores along the spatial positions (the fused layout change).
Compilation runs in a child process without TRITON_INTERPRET (triton.compile cannot run under it).
"""

from __future__ import annotations

import ast
import runpy
from pathlib import Path
from typing import Any

import pytest

from htam_graph.model import Task
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

import_candidate = runpy.run_path(str(Path(__file__).with_name("candidate_import.py")))["import_candidate"]
run_compile_child = runpy.run_path(str(Path(__file__).with_name("interp_child.py")))["run_compile_child"]
KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
KEY = "library_offload.channels_last_conv"
CASES = [
    "level1/86_conv_depthwise_separable_2D.py",  # no epilogue: the layout change alone
    "level2/2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide.py",  # per-channel bias, scalars
    "level2/20_ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd.py",  # 3D
]
_CONSTEXPRS = {"BLOCK_S": 64, "BLOCK_C": 32}
_ALIGNED = ("C", "S")  # ints Triton sees as multiples of 16 at the default sizes


def compile_variants(generated: str, directory: Path) -> list[dict[str, Any]]:
    """Compile every kernel of `generated` for sm_90, channels-last and NCHW, int32 and int64 offsets."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module = import_candidate(generated, Path(directory))
    kernels = [
        n for n in ast.parse(generated).body if isinstance(n, ast.FunctionDef) and n.name.endswith("_kernel")
    ]
    results = []
    for node in kernels:
        names = [a.arg for a in node.args.args]
        for channels_last in (True, False):
            for index_64 in (False, True):
                constexprs = {**_CONSTEXPRS, "Y_CHANNELS_LAST": channels_last, "INDEX_64": index_64}
                signature = {n: _arg_type(n, constexprs) for n in names}
                attrs = {
                    (names.index(n),): [["tt.divisibility", 16]]
                    for n in names
                    if n.endswith("_ptr") or n in _ALIGNED
                }
                fn = getattr(module, node.name)
                compiled = triton.compile(
                    ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                    target=GPUTarget("cuda", 90, 32),
                )
                ptx = compiled.asm["ptx"]
                results.append(
                    {
                        "kernel": node.name,
                        "channels_last": channels_last,
                        "entry": f".entry {node.name}" in ptx,
                        "cubin": len(compiled.asm["cubin"]) > 0,
                        "shared": "st.shared" in ptx,
                        "wide_loads": "ld.global.v4" in ptx,
                        "wide_stores": "st.global.v4" in ptx,
                    }
                )
    return results


def _arg_type(name: str, constexprs: dict[str, object]) -> str:
    if name in constexprs:
        return "constexpr"
    if name.endswith("_ptr"):
        return "*fp32"
    if name in ("C", "S", "n_tiles_s", "n_tiles_c") or name.endswith(("_inner", "_size")):
        return "i32"
    return "fp32"  # scalars read from module attributes


def _target_available() -> bool:
    try:
        from triton.backends import backends
    except ImportError:
        return False
    return "nvidia" in backends


@pytest.mark.skipif(not _target_available(), reason="this triton has no NVIDIA backend")
@pytest.mark.parametrize("rel", CASES, ids=[c.split("/")[1][:-3] for c in CASES])
def test_layout_kernels_compile_for_sm90(rel: str, tmp_path: Path) -> None:
    source = (KB / rel).read_text(encoding="utf-8")
    task = Task(key=rel, suite="kernelbench", level=None, name=rel, source=source, source_sha256="0" * 64)
    generated = default_recipes()[KEY].emit(task_view(task), default_recipes()[KEY].default_config)  # type: ignore[arg-type]
    results = run_compile_child(
        Path(__file__), "compile_variants", {"generated": generated, "directory": tmp_path}
    )
    assert len(results) == 4
    assert all(r["entry"] and r["cubin"] for r in results)
    for r in results:
        assert r["wide_loads"] and r["wide_stores"], r
        # channels-last: the tile changes axis between load and store, through shared memory
        assert r["shared"] == r["channels_last"], r
