"""compute_efficiency.tensor_core_fp32_emulation on convolutions: the 3xTF32 implicit-GEMM conv kernel runs
under TRITON_INTERPRET=1 on the CPU and matches torch.nn.functional.conv{1,2,3}d at 1e-4 for every geometry the
launcher takes; whole generated files match their Model, one passes the real evaluator, and convs the kernel
does not pay off for (or cannot compute) stay PyTorch calls.

The models are this test's own small modules (not benchmark tasks). Their analysed sizes are large enough for
the recipe to apply (it keeps small convs on cuDNN); the checks then run them at small sizes, since every size
of a generated file is read from its tensors at run time. The launcher cases call `tf32x3_conv` directly, below
the compute-bound threshold. The interpreter computes `tl.dot` in fp32, so these tests prove the indexing
(windows, strides, padding masks, dilation, K order and padding, edges, bias, the NCHW store), not the 3xTF32
rounding: benchmarks/tensor_core_conv.py measures that on the GPU.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest
import torch

from htam_graph.kernels_runtime.parent.corpus import shrink_task
from htam_graph.kernels_runtime.static_checks import analyse as static_analyse
from htam_graph.model import PrecisionPolicy, Task
from htam_graph.rules import RulesGenerator
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes.tensor_core.recipe import KEY, TensorCoreGemm

INTERP_CHILD = Path(__file__).with_name("interp_child.py")
run_compile_child = runpy.run_path(str(INTERP_CHILD))["run_compile_child"]
import_candidate = runpy.run_path(str(Path(__file__).with_name("candidate_import.py")))["import_candidate"]
load_sibling = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]
rev = load_sibling("recipe_evaluation")
composed_checks = load_sibling("composed_checks")

PLAIN = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c_in, c_out, kernel):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel, padding=1)

    def forward(self, x):
        return self.conv(x)


batch, c_in, c_out, size, kernel = 8, 16, 32, 64, 3


def get_inputs():
    return [torch.rand(batch, c_in, size, size)]


def get_init_inputs():
    return [c_in, c_out, kernel]
"""

CHAIN = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c_in, c_out, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, (3, 5), stride=2, dilation=(2, 1))
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias


batch, c_in, c_out, height, width = 8, 12, 48, 96, 80


def get_inputs():
    return [torch.randn(batch, c_in, height, width)]


def get_init_inputs():
    return [c_in, c_out, (c_out, 1, 1)]
"""

FUNCTIONAL_3D = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(c_out, c_in, 3, 3, 3) * 0.1)

    def forward(self, x):
        return torch.tanh(F.conv3d(x, self.weight, None, (1, 2, 2), (1, 0, 1)))


batch, c_in, c_out, depth, size = 4, 8, 32, 16, 32


def get_inputs():
    return [torch.randn(batch, c_in, depth, size, size)]


def get_init_inputs():
    return [c_in, c_out]
"""

MODELS = {"plain": PLAIN, "chain": CHAIN, "functional-3d": FUNCTIONAL_3D}
SMALL = {
    "plain": {"batch": 2, "c_in": 16, "c_out": 32, "size": 9},
    "chain": {"batch": 2, "c_in": 12, "c_out": 40, "height": 13, "width": 11},
    "functional-3d": {"batch": 1, "c_in": 5, "c_out": 24, "depth": 4, "size": 7},
}


def own_task(name: str, source: str | None = None) -> Task:
    return Task(
        key=f"own/tensor_core_conv_{name}",
        suite="own",
        level=None,
        name=name,
        source=source if source is not None else MODELS[name],
        source_sha256="0" * 64,
    )


def isolated(function: str, **kwargs: Any) -> Any:
    """Call a function of this module in a process with TRITON_INTERPRET=1 set before any import."""
    return runpy.run_path(str(INTERP_CHILD))["run_isolated"](__file__, function, kwargs)


def emit(task: Task) -> str:
    assert KEY in RulesGenerator().recipes_for(task)
    recipe = TensorCoreGemm()
    return recipe.emit(task_view(task), recipe.default_config)


def forward_of(source: str) -> str:
    return source.split("def forward", 1)[1]


def launcher_cases(candidate: str, directory: Path) -> dict[str, list[Any]]:
    """tf32x3_conv against torch.nn.functional.conv*d on every geometry; returns, per case, the K-loop mode
    the launcher picked: [one tap per K tile, padding masks]."""
    module = import_candidate(candidate, directory)
    g = torch.Generator().manual_seed(0)
    functional = torch.nn.functional

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    cases: dict[str, tuple[Any, ...]] = {  # (conv, x, weight, bias, stride, padding, dilation)
        "2-D, stride 1, no padding": (functional.conv2d, rand(2, 8, 10, 10), rand(16, 8, 3, 3), None, 1, 0, 1),
        "2-D, stride 2, padding 1, bias": (
            functional.conv2d, rand(2, 16, 11, 9), rand(32, 16, 3, 3), rand(32), 2, 1, 1,
        ),
        "kernel (3, 5), dilation (2, 1)": (
            functional.conv2d, rand(2, 8, 12, 12), rand(16, 8, 3, 5), rand(16), 1, (2, 1), (2, 1),
        ),
        "3-D": (functional.conv3d, rand(2, 4, 6, 7, 8), rand(16, 4, 3, 3, 3), rand(16), (1, 2, 1), 1, 1),
        "K not a multiple of BLOCK_K": (functional.conv2d, rand(2, 5, 9, 9), rand(24, 5, 3, 3), None, 1, 0, 1),
        "C_out not a multiple of BLOCK_N": (
            functional.conv2d, rand(2, 16, 8, 8), rand(40, 16, 3, 3), rand(40), 1, 1, 1,
        ),
        "batch 1": (functional.conv2d, rand(1, 12, 10, 12), rand(16, 12, 2, 3), None, (1, 2), (0, 1), 1),
        "1-D": (functional.conv1d, rand(2, 16, 30), rand(16, 16, 5), None, 2, 2, 2),
        "padding 'same', even kernel": (functional.conv2d, rand(2, 8, 9, 9), rand(16, 8, 4, 4), None, 1, "same", 1),
        "channels-last input": (
            functional.conv2d,
            rand(2, 16, 8, 8).contiguous(memory_format=torch.channels_last),
            rand(16, 16, 3, 3), None, 1, 0, 1,
        ),
    }  # fmt: skip
    modes = {}
    for name, (conv, x, w, b, stride, padding, dilation) in cases.items():
        expected = conv(x, w, b, stride, padding, dilation)
        got = module.tf32x3_conv(x, w, b, stride, padding, dilation)
        assert got.shape == expected.shape, f"{name}: shape {tuple(got.shape)} != {tuple(expected.shape)}"
        assert got.is_contiguous(), f"{name}: the result is not contiguous"
        err = (got - expected).abs().max().item()
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"{name}: max abs error {err}"
        block_k = module.conv_tiles(0, w.shape[0], x.shape[1], 0)[2]
        modes[name] = [x.shape[1] % block_k == 0, padding not in (0, "valid")]
    for bad in ({"groups": 2}, {"padding_mode": "reflect"}):
        try:
            module.tf32x3_conv(rand(1, 4, 6, 6), rand(16, 2, 3, 3), **bad)
        except ValueError as e:
            assert "groups" in str(e), str(e)
        else:
            raise AssertionError(f"{bad} must be refused")
    return modes


def test_the_conv_launcher_matches_torch_on_every_geometry(tmp_path: Path) -> None:
    modes = isolated("launcher_cases", candidate=emit(own_task("plain")), directory=tmp_path)
    assert len(modes) == 10
    # both K loops (one tap per K tile / a tap decoded per K element) ran, each with and without masks
    assert {tuple(mode) for mode in modes.values()} == {
        (True, True),
        (True, False),
        (False, True),
        (False, False),
    }


def test_generated_files_match_their_models(tmp_path: Path) -> None:
    sources, candidates = [], []
    for name, model in MODELS.items():
        candidate = emit(own_task(name))
        report = static_analyse(candidate, PrecisionPolicy.FP32_STRICT, require_kernel=True)
        assert report.syntax_error is None and report.defines_model_new and report.violations == [], name
        assert 'input_precision="tf32x3"' in candidate and "tf32x3_conv(x, self." in forward_of(candidate)
        assert "tf32x3_matmul" not in candidate  # no GEMM in these forwards: no GEMM kernel in the file
        sources.append(shrink_task(model, SMALL[name]))
        candidates.append(candidate)
    # the generated files read every size at run time: they run the models re-bound to small sizes
    errors = composed_checks.run_checks(sources, candidates, tmp_path)
    assert len(errors) == 3 and max(errors) < 1e-4


def test_the_epilogue_stays_fused_and_takes_the_conv_bias() -> None:
    forward = forward_of(emit(own_task("chain")))
    # the conv's bias moved into the fused kernel after it (as the composed recipe does), so the conv has none
    assert "tf32x3_conv(x, self.conv.weight, None, self.conv.stride, self.conv.padding" in forward
    assert "self.conv.bias.view(-1, 1, 1)" in forward and "# Triton: add -> relu -> add" in forward
    assert "self.conv(" not in forward and "F.conv" not in forward


def test_the_chain_passes_the_real_evaluator() -> None:
    task = own_task("chain")
    rev.assert_correct_in_real_evaluator(task, emit(task))


def two_convs(second: str, size: int = 64) -> str:
    """PLAIN followed by a second conv module `second` (an nn.Conv2d(...) expression of 32 channels in)."""
    return (
        PLAIN.replace(
            "        self.conv = nn.Conv2d(c_in, c_out, kernel, padding=1)\n",
            f"        self.conv = nn.Conv2d(c_in, c_out, kernel, padding=1)\n        self.second = {second}\n",
        )
        .replace("return self.conv(x)", "return self.second(self.conv(x))")
        .replace("size, kernel = 8, 16, 32, 64", f"size, kernel = 8, 16, 32, {size}")
    )


@pytest.mark.parametrize(
    ("second", "why"),
    [
        ("nn.Conv2d(32, 32, 3, groups=2)", "a grouped conv"),
        ("nn.Conv2d(32, 8, 3)", "fewer than 16 output channels"),
        ("nn.Conv2d(32, 16, 1, stride=4)", "too few multiply-adds"),
    ],
    ids=["grouped", "narrow", "small"],
)
def test_convs_the_kernel_does_not_pay_off_for_stay_pytorch_calls(second: str, why: str) -> None:
    forward = forward_of(emit(own_task("two", two_convs(second))))
    assert "y0 = tf32x3_conv(x, self.conv.weight, self.conv.bias," in forward
    assert "y1 = self.second(y0)  # PyTorch, unchanged" in forward, why
    assert forward.count("tf32x3_conv(") == 1


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (PLAIN.replace("size, kernel = 8, 16, 32, 64", "size, kernel = 2, 16, 32, 16"), "a small conv"),
        (PLAIN.replace("padding=1)", "padding=1, groups=4)"), "a grouped conv"),
        (PLAIN.replace("padding=1)", "padding=1, padding_mode='reflect')"), "reflect padding"),
    ],
    ids=["small", "grouped", "reflect"],
)
def test_a_forward_without_a_conv_to_replace_is_not_applicable(source: str, why: str) -> None:
    verdict = RulesGenerator().applies(KEY, own_task("t", source))
    assert not verdict, why
    assert "compute-bound" in verdict.reason


SM90_VARIANTS = {  # name: (C_in, C_out, padded): one tap per K tile with masks / taps decoded per K element
    "one tap per K tile": (64, 128, True),
    "taps per K element": (3, 16, False),
}


def compile_for_sm90(candidate: str, directory: Path) -> dict[str, dict[str, Any]]:
    """Compile the conv kernel for sm_90 with the launcher's tiles for each SM90_VARIANTS case; what its PTX
    holds. Strides are marked multiples of 16 (Triton specialises on that at run time when they are)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module = import_candidate(candidate, directory)
    fn = module.tf32x3_conv_kernel
    names = list(fn.arg_names)
    results = {}
    for name, (c_in, c_out, padded) in SM90_VARIANTS.items():
        block_m, block_n, block_k, warps, stages = module.conv_tiles(2**20, c_out, c_in, 9 * c_in)
        constexprs = {"C_IN": c_in, "KH": 3, "KW": 3, "SD": 1, "SH": 1, "SW": 1, "PD": 0, "PH": int(padded)}
        constexprs |= {"PW": int(padded), "DD": 1, "DH": 1, "DW": 1, "MASK_D": False, "MASK_H": padded}
        constexprs |= {"MASK_W": padded, "TAP_ALIGNED": c_in % block_k == 0, "HAS_BIAS": True, "GROUP_M": 8}
        constexprs |= {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k}
        signature = {
            n: "constexpr" if n in constexprs else "*fp32" if n.endswith("_ptr") else "i32" for n in names
        }
        aligned = [n for n in names if n.endswith("_ptr") or n.startswith("stride_")]
        attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
        compiled = triton.compile(
            ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
            target=GPUTarget("cuda", 90, 32),
            options={"num_warps": warps, "num_stages": stages},
        )
        ptx = compiled.asm["ptx"]
        copies = [line for line in ptx.splitlines() if "cp.async.cg.shared.global" in line]
        results[name] = {
            "entry": ".entry tf32x3_conv_kernel" in ptx,
            "wgmma_tf32": sum("wgmma.mma_async" in line and ".tf32" in line for line in ptx.splitlines()),
            "copies_16_bytes": bool(copies) and all("0x10" in line for line in copies),
            "shared_bytes": compiled.metadata.shared,
        }
    return results


def _nvidia_backend() -> bool:
    try:
        from triton.backends import backends
    except ImportError:
        return False
    return "nvidia" in backends


@pytest.mark.skipif(not _nvidia_backend(), reason="this triton has no NVIDIA backend")
def test_the_conv_kernel_compiles_for_sm90_into_tensor_core_instructions(tmp_path: Path) -> None:
    kwargs = {"candidate": emit(own_task("plain")), "directory": tmp_path}
    results = run_compile_child(Path(__file__), "compile_for_sm90", kwargs)
    assert set(results) == set(SM90_VARIANTS)
    for name, result in results.items():
        assert result["entry"] and result["wgmma_tf32"] > 0, (name, result)
        assert 0 < result["shared_bytes"] <= 227 * 1024, (name, result)  # an H100 / H200 block's limit
    # one tap per K tile: A's rows are contiguous channels, copied to shared memory 16 bytes at a time
    assert results["one tap per K tile"]["copies_16_bytes"], results
