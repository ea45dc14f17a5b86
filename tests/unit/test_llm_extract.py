"""extract_code on the reply shapes models actually produce."""

from __future__ import annotations

import ast

import pytest

from htam_graph.llm.extract import extract_code, named_strategy, strip_reasoning, undefined_names
from htam_graph.llm.generator import reply_from_text
from htam_graph.model import Usage

TRITON_FILE = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
"""

REFERENCE_FILE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""

CUDA_KERNEL = r"""#include <torch/extension.h>

__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;  // printf("\n") would stay escaped
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}"""

CPP_DECL = "torch::Tensor relu_cuda(torch::Tensor x);"

CUDA_PY_USING_VARS = """import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_ext = load_inline(
    name="relu_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_cuda"],
)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_ext.relu_cuda(x)
"""


def _fence(body: str, tag: str = "python", fence: str = "```") -> str:
    return f"{fence}{tag}\n{body.rstrip()}\n{fence}"


def _assert_is_triton_file(source: str | None) -> None:
    assert source is not None
    tree = ast.parse(source)
    assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)
    assert "@triton.jit" in source
    assert source.rstrip() == TRITON_FILE.rstrip()


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(_fence(TRITON_FILE), id="python-fence-only"),
        pytest.param(
            "Here is the optimized kernel:\n\n" + _fence(TRITON_FILE, "py") + "\n", id="prose-then-py-fence"
        ),
        pytest.param(
            _fence(TRITON_FILE, "") + "\n\nThis fuses the load and the max.",
            id="untagged-fence-trailing-prose",
        ),
        pytest.param(_fence(TRITON_FILE, "python", "~~~"), id="tilde-fence"),
        pytest.param(_fence(TRITON_FILE, "Python", "````"), id="four-backticks-capital-tag"),
        pytest.param(
            "<think>\nThe reference uses torch.relu. ```python\nclass ModelNew: broken(\n```\n</think>\n"
            + _fence(TRITON_FILE),
            id="think-with-fake-code-then-answer",
        ),
        pytest.param(
            "Let me reason about coalescing...\nSo a 1D grid works.\n</think>\n\n" + _fence(TRITON_FILE),
            id="close-think-only-(template-opened-it)",
        ),
        pytest.param(
            "The original is:\n" + _fence(REFERENCE_FILE) + "\nThe new version:\n" + _fence(TRITON_FILE),
            id="reference-block-then-answer-block",
        ),
        pytest.param(
            "First attempt:\n"
            + _fence(TRITON_FILE.replace("BLOCK=1024", "BLOCK=1024)"))
            + "\nSorry, fixed:\n"
            + _fence(TRITON_FILE)
            + "\nUsage:\n"
            + _fence("model = ModelNew()\ny = model(x)"),
            id="broken-then-fixed-then-usage-example",
        ),
        pytest.param(
            "Sure! The code below replaces torch.relu.\n\n" + TRITON_FILE, id="unfenced-after-prose"
        ),
        pytest.param(
            TRITON_FILE + "\nExplanation:\n- one program per 1024 elements\n- masked tail\n",
            id="unfenced-trailing-prose",
        ),
        pytest.param(TRITON_FILE + "\nNote: this is fast\n", id="unfenced-trailing-prose-that-parses"),
        pytest.param("Here it is:\n```python\n" + TRITON_FILE, id="unclosed-fence-complete-code"),
        pytest.param("\ufeff" + _fence(TRITON_FILE).replace("\n", "\r\n"), id="bom-and-crlf"),
    ],
)
def test_extracts_the_model_new_file(reply: str) -> None:
    result = extract_code(reply)
    assert result.reason.startswith("ok"), result.reason
    _assert_is_triton_file(result.source)


def test_merges_separate_cpp_and_cuda_blocks_into_the_named_variables() -> None:
    reply = (
        "The CUDA kernel:\n"
        + _fence(CUDA_KERNEL, "cuda")
        + "\nThe declaration:\n"
        + _fence(CPP_DECL, "cpp")
        + "\nAnd the module:\n"
        + _fence(CUDA_PY_USING_VARS)
    )
    result = extract_code(reply)
    assert result.source is not None, result.reason
    assert "merged" in result.reason
    namespace: dict[str, object] = {}
    # Execute only the merged string assignments to check they hold exactly the block texts.
    tree = ast.parse(result.source)
    assigns = [n for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)]
    exec(compile(ast.Module(body=assigns, type_ignores=[]), "<merged>", "exec"), namespace)
    assert namespace["cuda_source"] == "\n" + CUDA_KERNEL + "\n"
    assert namespace["cpp_source"] == "\n" + CPP_DECL + "\n"
    assert undefined_names(tree) == set()
    # the definitions come before their use in load_inline
    assert result.source.index("cuda_source =") < result.source.index("cuda_sources=cuda_source")


def test_single_cpp_block_merges_into_the_single_missing_source_variable() -> None:
    py = CUDA_PY_USING_VARS.replace("cpp_sources=cpp_source,\n    ", "cpp_sources='',\n    ")
    result = extract_code(_fence(CUDA_KERNEL, "cpp") + "\n" + _fence(py))
    assert result.source is not None
    assert undefined_names(ast.parse(result.source)) == set()


def test_kernel_in_its_own_python_block_is_merged() -> None:
    kernel, module = TRITON_FILE.split("\n\n\nclass ModelNew")
    reply = (
        "Kernel:\n"
        + _fence(kernel)
        + "\nModule:\n"
        + _fence("import torch.nn as nn\n\nclass ModelNew" + module)
    )
    result = extract_code(reply)
    assert result.source is not None, result.reason
    assert "relu_kernel" in result.reason
    assert "@triton.jit" in result.source
    assert undefined_names(ast.parse(result.source)) == set()


@pytest.mark.parametrize(
    ("reply", "reason_part"),
    [
        pytest.param("", "empty reply", id="empty"),
        pytest.param("   \n\n", "empty reply", id="blank"),
        pytest.param("I cannot help with that kernel.", "no code", id="prose-only"),
        pytest.param(_fence(REFERENCE_FILE), "no code block defines class ModelNew", id="only-reference"),
        pytest.param("<think>\nlong reasoning that was cut off", "only reasoning", id="unclosed-think"),
        pytest.param(
            _fence(TRITON_FILE.replace("def forward(self, x):", "def forward(self, x)")),
            "does not parse: line",
            id="syntax-error-in-closed-block",
        ),
        pytest.param(
            "```python\n" + TRITON_FILE[: TRITON_FILE.index("relu_kernel[(") + 20],
            "not closed: reply truncated?",
            id="truncated-reply",
        ),
        pytest.param(
            "Sure.\n" + TRITON_FILE[: TRITON_FILE.index("relu_kernel[(") + 20],
            "does not parse",
            id="truncated-unfenced-reply-is-not-trimmed-into-a-parseable-file",
        ),
        pytest.param(REFERENCE_FILE, "no code defines class ModelNew", id="unfenced-without-model-new"),
    ],
)
def test_unusable_replies_give_none_and_a_reason(reply: str, reason_part: str) -> None:
    result = extract_code(reply)
    assert result.source is None
    assert reason_part in result.reason


def test_strip_reasoning() -> None:
    assert strip_reasoning("<think>a</think>b<thinking>c</thinking>d") == "bd"
    assert strip_reasoning("reasoning</think>answer") == "answer"
    assert strip_reasoning("<think>never closed") is None


@pytest.mark.parametrize(
    ("reply", "named"),
    [
        ("STRATEGY: fusion.elementwise_chain\n```python\nx = 1\n```", "fusion.elementwise_chain"),
        ("strategy: tri_vec", "tri_vec"),  # any case
        ("**Strategy:** `memory_access.vectorized_loads`", "memory_access.vectorized_loads"),  # markdown
        ("## STRATEGY - `data_reuse.register_tiling` because it fits", "data_reuse.register_tiling"),
        ("Strategy: tri_vec.", "tri_vec"),  # a sentence's full stop is not part of the key
        ("<think>STRATEGY: from.the.reasoning</think>\nSTRATEGY: the.answer", "the.answer"),
        ("</think>\nSTRATEGY: after.an.opened.think", "after.an.opened.think"),
        ("<think>STRATEGY: never.closed", None),  # only reasoning: no answer to read
        ("```python\n# STRATEGY: in.the.code\n```\nno line outside", None),
        ("STRATEGY: none", "none"),
        ("STRATEGY: None.", "none"),
        ("STRATEGY: no applicable strategy (I stay within the direction)", "none"),
        ("STRATEGY: N/A", "none"),
        ("STRATEGY: no.such.key", "no.such.key"),  # a key, even if it starts with "no"
        ("The strategy I applied is vectorisation", None),  # prose, not a STRATEGY line
        ("STRATEGY: first.one\nSTRATEGY: second.one", "first.one"),
    ],
)
def test_the_strategy_line_is_read_as_the_model_wrote_it(reply: str, named: str | None) -> None:
    assert named_strategy(reply) == named


def test_a_truncated_reply_is_flagged_even_when_its_code_parses() -> None:
    text = f"```python\n{TRITON_FILE}```"
    usage = Usage(output_tokens=4096)
    cut = reply_from_text(text, model="m", usage=usage, stop_reason="max_tokens")
    assert (
        cut.source is not None and cut.truncated and cut.finish_reason == "max_tokens" and cut.error is None
    )
    assert cut.extraction == "ok: fenced python block 1 of 1"
    whole = reply_from_text(text, model="m", stop_reason="end_turn")
    assert not whole.truncated
    lost = reply_from_text("```python\nclass ModelNew(nn.Module):\n    def f(", model="m", usage=usage,
                           stop_reason="length")  # fmt: skip
    assert lost.source is None and lost.truncated
    assert lost.error is not None and "cut off at the max_tokens limit (4096 tokens)" in lost.error
