"""The CPU path through the real worker: `@triton.autotune` runs its first config under the interpreter, the
device facts of a CPU run say what the interpreter is and what the inputs are, and a library conv with a Triton
epilogue (the library policy) passes the real evaluator."""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.model import EvalRequest

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
LEAKY = (KB / "level1" / "20_LeakyReLU.py").read_text()

AUTOTUNED = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK": 256}, num_warps=4), triton.Config({"BLOCK": 1024}, num_warps=8)],
    key=["n"],
)
@triton.jit
def leaky_relu_kernel(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.where(x >= 0, x, x * slope), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        leaky_relu_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, self.negative_slope)
        return out
"""

CONV_RELU_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c_in, c_out, k):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k)

    def forward(self, x):
        return torch.relu(self.conv(x))


batch_size = 2
c_in, c_out, k = 3, 4, 3
size = 10


def get_inputs():
    return [torch.rand(batch_size, c_in, size, size)]


def get_init_inputs():
    return [c_in, c_out, k]
"""
LIBRARY_CONV_WITH_TRITON_EPILOGUE = """import torch
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
        y = F.conv2d(x, self.conv.weight, self.conv.bias).contiguous()
        out = torch.empty_like(y)
        n = y.numel()
        relu_kernel[(triton.cdiv(n, 256),)](y, out, n, BLOCK=256)
        return out
"""


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory: pytest.TempPathFactory) -> SubprocessEvaluator:
    return SubprocessEvaluator(cache_dir=tmp_path_factory.mktemp("cache"))


def _request(task: str, candidate: str, **kw: object) -> EvalRequest:
    values: dict[str, object] = dict(
        task_key="t", task_source=task, candidate_source=candidate, device="cpu", shape="smoke", trials=2,
        timing_runs=1, warmup_runs=0, timeout_s=300.0,
    )  # fmt: skip
    values.update(kw)
    return EvalRequest(**values)  # type: ignore[arg-type]


def test_an_autotuned_kernel_runs_its_first_config_under_the_interpreter(
    evaluator: SubprocessEvaluator,
) -> None:
    """Without the worker's shim the autotuner benchmarks both configs with the GPU driver and fails on the CPU
    ("0 active drivers")."""
    result = evaluator.evaluate(_request(LEAKY, AUTOTUNED))
    assert result.correct, result.error_excerpt
    assert result.checks["kernel_launched"].startswith("pass")


def test_a_library_conv_with_a_triton_epilogue_passes_the_evaluator(evaluator: SubprocessEvaluator) -> None:
    result = evaluator.evaluate(_request(CONV_RELU_TASK, LIBRARY_CONV_WITH_TRITON_EPILOGUE, shape="default"))
    assert result.correct, result.error_excerpt
    assert result.checks["kernel_launched"].startswith("pass")


def test_cpu_device_facts_name_the_interpreter_and_the_evaluated_inputs(
    evaluator: SubprocessEvaluator,
) -> None:
    request = _request(LEAKY, "", candidate_kind="reference")
    facts = evaluator.device_facts(request)
    assert facts is not None and facts.device == "cpu" and facts.gpu_arch == "cpu"
    assert facts.triton_interpreted and facts.torch_version and facts.triton_version
    assert facts.shape_variant.startswith("smoke") and facts.inputs and facts.inputs[0].dtype == "float32"
    assert facts.inputs[0].shape is not None and len(facts.inputs[0].shape) == 2
    assert facts.ncu is None and facts.eager_kernels == []  # nothing GPU-side is measured on the CPU
    assert evaluator.device_facts(request) == facts  # cached per task, shape and installed versions
