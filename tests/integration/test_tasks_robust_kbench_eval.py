"""A Robust-KBench task through the real SubprocessEvaluator (CPU, smoke sizes, Triton under the interpreter).

The imported layernorm task (the sample at test sizes, robust_kbench_small.py) declares its other configurations (batch sizes, init methods, feature shapes); the
evaluator's `task_configs` check runs every one. A kernel that hard-codes one batch row is right at the default
configuration (batch 1) only, and must be rejected naming the configuration it fails; the same kernel with
the batch handled, and the reference itself, must pass.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from htam_graph.importers.robust_kbench import scan
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.model import ErrorKind, EvalRequest, Task
from htam_graph.state import reference_as_candidate

_load = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]
small_sample = _load("robust_kbench_small").small_sample

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layer_norm_rows(x_ptr, w_ptr, b_ptr, y_ptr, n_row, n_w, eps, BLOCK: tl.constexpr):
    """One program per row of n_row elements; weight/bias index = position % n_w. Two passes, fp32."""
    base = tl.program_id(0) * n_row
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_row, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + base + offs, mask=offs < n_row, other=0.0)
    mean = tl.sum(acc, axis=0) / n_row
    acc2 = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_row, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        d = tl.where(offs < n_row, tl.load(x_ptr + base + offs, mask=offs < n_row, other=0.0) - mean, 0.0)
        acc2 += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc2, axis=0) / n_row + eps)
    for start in range(0, n_row, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_row
        x = tl.load(x_ptr + base + offs, mask=mask, other=0.0)
        w = tl.load(w_ptr + offs % n_w, mask=mask, other=0.0)
        b = tl.load(b_ptr + offs % n_w, mask=mask, other=0.0)
        tl.store(y_ptr + base + offs, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features, dim1, dim2, eps=1e-5, init_method="standard"):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_features, dim1, dim2))
        self.bias = nn.Parameter(torch.zeros(num_features, dim1, dim2))

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n_w = self.weight.numel()
        ROWS
        layer_norm_rows[(rows,)](x, self.weight, self.bias, y, x.numel() // rows, n_w, self.eps, BLOCK=1024)
        return y
'''
PER_SAMPLE = KERNEL.replace("ROWS", "rows = x.shape[0]")
ONE_ROW = KERNEL.replace("ROWS", "rows = 1  # bug: the whole batch normalised as one row")


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return scan(small_sample(tmp_path_factory.mktemp("tasks"))).tasks[0]


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory: pytest.TempPathFactory) -> SubprocessEvaluator:
    return SubprocessEvaluator(cache_dir=tmp_path_factory.mktemp("cache"))


def _request(task: Task, candidate: str, kind: str = "kernel") -> EvalRequest:
    return EvalRequest(
        task_key=task.key, task_source=task.source, candidate_source=candidate, device="cpu", shape="smoke",
        candidate_kind=kind, trials=2, extra_shapes=0, timing_runs=1, warmup_runs=0,  # type: ignore[arg-type]
        measure_baselines=False, timeout_s=300,
    )  # fmt: skip


def test_kernel_right_only_at_batch_one_is_rejected_naming_the_config(
    task: Task, evaluator: SubprocessEvaluator
) -> None:
    result = evaluator.evaluate(_request(task, ONE_ROW))
    assert result.error_kind is ErrorKind.MISMATCH, (result.error_kind, result.error_excerpt)
    assert result.checks["extra_shapes"].startswith("skipped")  # only the configurations could catch it
    assert result.checks["task_configs"].startswith("fail")
    assert "config multi5 batch_size=8" in result.error_excerpt, result.error_excerpt
    assert result.compiled and not result.correct


def test_per_sample_kernel_passes_every_config(task: Task, evaluator: SubprocessEvaluator) -> None:
    result = evaluator.evaluate(_request(task, PER_SAMPLE))
    assert result.correct, (result.error_kind, result.error_excerpt, result.checks)
    note = result.checks["task_configs"]
    assert note.startswith("pass") and "multi5" in note and "multi8" in note
    assert result.checks["kernel_launched"].startswith("pass")


def test_reference_as_candidate_passes_every_config(task: Task, evaluator: SubprocessEvaluator) -> None:
    result = evaluator.evaluate(_request(task, reference_as_candidate(task.source), kind="reference"))
    assert result.correct, (result.error_kind, result.error_excerpt, result.checks)
    assert result.checks["task_configs"].startswith("pass: ")
    assert result.max_abs_err == 0.0
