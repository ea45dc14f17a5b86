"""Static checks on candidate sources (kernels_runtime.static_checks): each rule fires, and clean code passes."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from htam_graph.kernels_runtime.parent.reference import reference_as_candidate
from htam_graph.kernels_runtime.static_checks import analyse
from htam_graph.model import Language, PrecisionPolicy

STRICT = PrecisionPolicy.FP32_STRICT

TRITON_OK = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        k[(1,)](x, out, x.numel(), BLOCK=1024)
        return out
"""

CUDA_OK = """
import torch
from torch.utils.cpp_extension import load_inline
src = "__global__ void k(float* x) {}  torch::Tensor f(torch::Tensor x) { return x; }"
ext = load_inline(name="e", cpp_sources="torch::Tensor f(torch::Tensor x);", cuda_sources=src, functions=["f"])
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.f(x)
"""


def _violations(body: str, policy: PrecisionPolicy = STRICT, require_kernel: bool = True) -> list[str]:
    return analyse(TRITON_OK + "\n" + body, policy, require_kernel).violations


def test_clean_triton_candidate_passes_and_is_detected_as_triton() -> None:
    report = analyse(TRITON_OK, STRICT, True)
    assert report.violations == []
    assert report.defines_model_new and report.has_triton_kernel
    assert report.language is Language.TRITON and not report.needs_cuda_build


def test_cuda_candidate_detected_and_needs_a_build() -> None:
    report = analyse(CUDA_OK, STRICT, True)
    assert report.violations == []
    assert report.has_cuda_kernel and report.needs_cuda_build and report.language is Language.CUDA


def test_syntax_error_is_reported_not_raised() -> None:
    report = analyse("def f(:\n", STRICT, True)
    assert report.syntax_error and "SyntaxError" in report.syntax_error


def test_missing_model_new() -> None:
    assert not analyse(TRITON_OK.replace("ModelNew", "Other"), STRICT, True).defines_model_new


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("import threading", "threading"),
        ("import concurrent.futures", "concurrent"),
        ("import asyncio", "asyncio"),
        ("from multiprocessing import Pool", "multiprocessing"),
        ("import gc", "gc"),
        ("import ctypes", "ctypes"),
        ("import level1_22_Tanh", "level1_22_Tanh"),
        ("torch.cuda.Event = object", "torch.cuda.Event"),
        ("torch.cuda.synchronize = lambda: None", "torch.cuda.synchronize"),
        ("triton.testing.do_bench = lambda f: 0.0", "triton.testing.do_bench"),
        ("setattr(torch.cuda, 'Event', object)", "setattr"),
        ("import functools\nfunctools.partial(setattr, torch, 'tanh', abs)()", "setattr"),
        ("torch.__dict__['tanh'] = abs", "__dict__"),
        ("getattr(torch.cuda, 'Str' + 'eam')", "computed name"),
        ("torch.backends.cuda.matmul.allow_tf32 = True", "allow_tf32"),
        ("torch.backends.cudnn.allow_tf32 = True", "allow_tf32"),
        ("torch.set_float32_matmul_precision('high')", "set_float32_matmul_precision"),
        ("y = torch.ones(2).half()", ".half()"),
        ("y = torch.ones(2).bfloat16()", ".bfloat16()"),
        ("y = torch.ones(2, dtype=torch.float16)", "float16"),
        ("with torch.autocast('cuda'):\n    pass", "autocast"),
        ("s = torch.cuda.Stream()", "side stream"),
        ("x = Model()", "reference `Model`"),
        ("exec('1')", "exec"),
        ("eval('1')", "eval"),
        ("__import__('os')", "__import__"),
        ("open('/etc/passwd')", "open"),
        ("import sys\nsys.modules['x'] = None", "sys.modules"),
        ("import os\nos.system('true')", "os.system"),
        ("try:\n    pass\nexcept Exception:\n    y = torch.tanh(torch.ones(1))", "except handler"),
    ],
)
def test_each_rule_fires(body: str, needle: str) -> None:
    found = _violations(body)
    assert any(needle in v for v in found), found


def test_tl_dot_must_be_ieee_under_fp32_strict_but_not_under_tf32() -> None:
    body = "@triton.jit\ndef mm(a, b):\n    c = tl.dot(a, b)\n"
    assert any("tl.dot" in v for v in _violations(body))
    assert not any("tl.dot" in v for v in _violations(body, PrecisionPolicy.TF32))
    for ok in ("ieee", "tf32x3"):
        exact = body.replace("tl.dot(a, b)", f"tl.dot(a, b, input_precision={ok!r})")
        assert not any("tl.dot" in v for v in _violations(exact))


def test_an_explicit_tf32_dot_is_rejected_and_named() -> None:
    """A hand-made hi/lo split summed with three `input_precision='tf32'` dots is still single-pass TF32 to the
    check; the message names the precision written and the compensated one to use instead."""
    split = (
        "@triton.jit\ndef mm(ah, al, bh, bl, acc):\n"
        "    acc = tl.dot(al, bh, acc, input_precision='tf32')\n"
        "    acc = tl.dot(ah, bh, acc, input_precision='tf32')\n"
    )
    found = [v for v in _violations(split) if "tl.dot" in v]
    assert len(found) == 2
    assert all("input_precision='tf32'" in v and "'tf32x3'" in v and "defaults" not in v for v in found)
    dynamic = "@triton.jit\ndef mm(a, b, p):\n    c = tl.dot(a, b, input_precision=p)\n"
    assert any("must be the literal" in v for v in _violations(dynamic))
    assert not any("tl.dot" in v for v in _violations(split, PrecisionPolicy.TF32))


def test_precision_rules_follow_the_policy() -> None:
    assert _violations("torch.backends.cuda.matmul.allow_tf32 = True", PrecisionPolicy.TF32) == []
    assert _violations("y = torch.ones(2).half()", PrecisionPolicy.BF16) == []
    assert any("half" in v for v in _violations("y = torch.ones(2).half()", PrecisionPolicy.TF32))


def test_cuda_source_precision_tokens() -> None:
    fp16 = CUDA_OK.replace("__global__ void k(float* x) {}", "__global__ void k(__half* x) {}")
    assert any("__half" in v for v in analyse(fp16, STRICT, True).violations)
    assert analyse(fp16, PrecisionPolicy.BF16, True).violations == []


def test_kernel_required_only_on_the_kernel_track() -> None:
    pure = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.tanh(x)\n"
    assert any("no kernel" in v for v in analyse(pure, STRICT, True).violations)
    assert analyse(pure, STRICT, False).violations == []


def test_pasted_reference_class_may_exist_but_not_be_used() -> None:
    body = "class Model(nn.Module):\n    def __init__(self):\n        super(Model, self).__init__()\n"
    assert _violations(body) == []
    assert any("Model" in v for v in _violations(body + "m = Model()\n"))


def test_allowed_torch_knob_and_environment() -> None:
    assert _violations("torch.backends.cudnn.benchmark = True\nimport os\nos.environ['X'] = '1'") == []


def test_reference_as_candidate_renames_identifiers_only() -> None:
    src = 'import torch\n# Model in a comment\nclass Model(torch.nn.Module):\n    """Model doc"""\n    def __init__(self):\n        super(Model, self).__init__()\n'
    out = reference_as_candidate(src)
    assert "class ModelNew(" in out and "super(ModelNew, self)" in out
    assert "# Model in a comment" in out and '"""Model doc"""' in out


KERNELBENCH_FILES = sorted(
    glob.glob(str(Path(__file__).resolve().parents[1] / "data" / "kernelbench" / "level*" / "*.py"))
)


@pytest.mark.parametrize("path", KERNELBENCH_FILES)
def test_every_kernelbench_reference_passes_on_the_reference_track(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        report = analyse(reference_as_candidate(f.read()), STRICT, False)
    assert report.violations == [] and report.defines_model_new and report.syntax_error is None
