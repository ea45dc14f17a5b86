"""One library policy, and the three places that state or enforce it agree: the system prompt, the seed memory's
text and the runtime's checks.

The policy: a library GEMM or convolution (cuBLAS / cuDNN through torch) may stay in a candidate, with custom
kernels around it; the candidate must contain a custom kernel that runs on every call. The static check (a
candidate without a kernel) is pinned here; the runtime check (a kernel that never launches) by the adversarial
corpus (`tests/data/adversarial/kernel_not_launched.py`), and a library conv + Triton epilogue passing the real
evaluator by tests/integration/test_library_policy_eval.py.
"""

from __future__ import annotations

import re

import pytest

from htam_graph.kernels_runtime.static_checks import analyse
from htam_graph.llm.prompts import render_prompt
from htam_graph.model import GenerationRequest, GlobalDirection, Language, PrecisionPolicy, Task
from htam_graph.seed import load_seed

LIBRARY_CONV_WITH_EPILOGUE = """import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, c_in, c_out, k):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k)

    def forward(self, x):
        y = F.conv2d(x, self.conv.weight, self.conv.bias)
        out = torch.empty_like(y)
        n = y.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](y, out, n, BLOCK=1024)
        return out
"""
LIBRARY_ONLY = """import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, c_in, c_out, k):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k)

    def forward(self, x):
        return torch.relu(F.conv2d(x, self.conv.weight, self.conv.bias))
"""


def _system(language: Language) -> str:
    task = Task(key="t", suite="s", level=2, name="t", source="class Model: pass\n", source_sha256="0" * 64)
    request = GenerationRequest(
        task=task, step=1, direction=GlobalDirection(key="fusion", name="f", intent="i"), strategy=None,
        base_source="", language=language, state_summary="", precision_policy=PrecisionPolicy.FP32_STRICT,
    )  # fmt: skip
    return render_prompt(request).system


@pytest.mark.parametrize("language", [Language.TRITON, Language.CUDA])
def test_the_system_prompt_allows_library_gemm_and_conv_with_a_custom_kernel(language: Language) -> None:
    system = " ".join(_system(language).split())
    assert "the heavy GEMM or convolution may stay a library call (cuBLAS" in system and "cuDNN" in system
    assert "`F.conv1d/2d/3d`" in system and "`torch.matmul`" in system
    assert "`F.scaled_dot_product_attention`" in system
    assert "at least one custom kernel must do real work on every call" in system
    assert "is rejected" in system
    # the old rule that forbade what the memory recommends and the evaluator accepts is gone
    assert not re.search(r"no calling the reference operator|Never fall back to PyTorch for the core", system)
    assert system.count("library call") == 1  # stated once


def test_the_seed_memory_says_the_same() -> None:
    seed = load_seed()
    g = next(x for x in seed.globals if x.key == "library_offload")
    locals_ = {x.key: x for x in seed.locals}
    texts = [g.intent, *g.risks, *g.goals]
    for key in (
        "library_offload.keep_library_gemm",
        "fusion.library_epilogue",
        "library_offload.fused_attention_call",
    ):
        loc = locals_[key]
        texts += [loc.pattern, *loc.checks, *loc.risks, *loc.applicable_when]
    joined = " ".join(" ".join(texts).split())
    assert "Keep the heavy op in the library" in joined and "Keep vendor libraries" in joined
    assert "only calls library ops is rejected" in joined
    assert "only library calls is rejected" in joined
    assert "only the library attention call is rejected" in joined
    # no hedging about whether a custom kernel is needed: the policy is decided
    assert not re.search(r"may require|may reject|if the harness requires", joined)


def test_the_static_checks_accept_a_library_conv_with_a_kernel_and_reject_one_without() -> None:
    ok = analyse(LIBRARY_CONV_WITH_EPILOGUE, PrecisionPolicy.FP32_STRICT, require_kernel=True)
    assert ok.violations == [] and ok.language is Language.TRITON
    bad = analyse(LIBRARY_ONLY, PrecisionPolicy.FP32_STRICT, require_kernel=True)
    assert any(v.startswith("no kernel") for v in bad.violations)
