"""`refprobe.meta_forward`, the one meta-device run of a task, and its two users: `estimate_meta` (shape
search) and `sharing.memory_need_bytes` (GPU memory budget). Sizes are default-like and far beyond this
machine's memory: anything allocated for real would fail the test."""

from __future__ import annotations

import types

import torch

from htam_graph.kernels_runtime.worker import refprobe, sharing
from htam_graph.kernels_runtime.worker.taskmod import load_task_module

ROWS, IN, OUT = 1 << 20, 4096, 2048  # a 16 GiB input, a 8 GiB output: meta only

LINEAR = f"""
import torch
import torch.nn as nn

ROWS = {ROWS}


class Model(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.lin = nn.Linear(n_in, n_out)

    def forward(self, x):
        return self.lin(x)


def get_inputs():
    return [torch.randn(ROWS, {IN})]


def get_init_inputs():
    return [{IN}, {OUT}]
"""


def _edit(source: str, old: str, new: str) -> str:
    assert old in source  # a variant that silently equals LINEAR would test nothing
    return source.replace(old, new)


ITEM_IN_INIT = _edit(LINEAR, "super().__init__()", "super().__init__()\n        torch.ones(1).item()")
BROKEN_INPUTS = _edit(LINEAR, f"torch.randn(ROWS, {IN})]", f"torch.randn(ROWS, {IN}).tolist()[0]]")
ITEM_IN_FORWARD = _edit(LINEAR, "return self.lin(x)", "return self.lin(x) * x.sum().item()")
NO_META_KERNEL = _edit(LINEAR, "return self.lin(x)", "raise NotImplementedError('no meta kernel for my_op')")
WARNS = _edit(
    _edit(
        LINEAR, "super().__init__()", "super().__init__()\n        warnings.warn('old', DeprecationWarning)"
    ),
    "return self.lin(x)",
    "warnings.warn('hint')\n        return self.lin(x)",
).replace("import torch\n", "import warnings\nimport torch\n", 1)
# A 4 TiB tensor the forward creates without naming a device: it must land on the meta device too.
MAKES_A_TENSOR = _edit(LINEAR, "return self.lin(x)", "return self.lin(x) + torch.zeros(1 << 40)[:1]")
BATCHNORM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(256)

    def forward(self, x):
        return self.bn(x) + x.sum().item()


def get_inputs():
    return [torch.randn(1024, 256)]


def get_init_inputs():
    return []
"""


def _task(source: str) -> types.ModuleType:
    task: types.ModuleType = load_task_module(source, "test/meta")
    return task


def test_meta_forward_builds_runs_and_counts_flops_without_allocating() -> None:
    run = refprobe.meta_forward(_task(LINEAR), count_flops=True)
    assert run.build_error is None and run.forward_error is None and run.forward_ok
    assert isinstance(run.model, torch.nn.Module) and all(p.is_meta for p in run.model.parameters())
    assert run.inputs is not None and [tuple(x.shape) for x in run.inputs] == [(ROWS, IN)]
    assert run.output.is_meta and tuple(run.output.shape) == (ROWS, OUT)
    assert run.flops == 2 * ROWS * IN * OUT
    assert refprobe.meta_forward(_task(LINEAR)).flops == 0  # FLOPs only when asked for


def test_meta_forward_without_forward_only_builds() -> None:
    run = refprobe.meta_forward(_task(ITEM_IN_FORWARD), forward=False)
    assert run.model is not None and run.inputs is not None
    assert run.build_error is None and run.forward_error is None  # the failing forward never ran
    assert not run.forward_ok and run.output is None and run.flops == 0


def test_build_failure_is_returned_and_the_inputs_are_still_built() -> None:
    run = refprobe.meta_forward(_task(ITEM_IN_INIT), count_flops=True)
    assert isinstance(run.build_error, RuntimeError) and "meta" in str(run.build_error)
    assert run.model is None and not run.forward_ok and run.output is None and run.forward_error is None
    assert run.inputs is not None and tuple(run.inputs[0].shape) == (ROWS, IN)

    run = refprobe.meta_forward(_task(BROKEN_INPUTS))
    assert isinstance(run.build_error, NotImplementedError | RuntimeError)
    assert run.inputs is None and isinstance(run.model, torch.nn.Module) and not run.forward_ok


def test_forward_failure_on_meta_is_returned_with_the_built_task() -> None:
    run = refprobe.meta_forward(_task(ITEM_IN_FORWARD), count_flops=True)
    assert run.build_error is None and isinstance(run.forward_error, RuntimeError)
    assert not run.forward_ok and run.output is None and run.flops == 0
    assert isinstance(run.model, torch.nn.Module) and run.inputs is not None

    run = refprobe.meta_forward(_task(NO_META_KERNEL))
    assert isinstance(run.forward_error, NotImplementedError) and not run.forward_ok


def test_task_warnings_are_silenced_and_created_tensors_stay_on_meta() -> None:
    # pytest turns warnings into errors here: an unsilenced one would be a build or forward error.
    run = refprobe.meta_forward(_task(WARNS))
    assert run.build_error is None and run.forward_error is None and run.forward_ok
    run = refprobe.meta_forward(_task(MAKES_A_TENSOR))
    assert run.forward_ok and run.output.is_meta


def test_estimate_meta_sizes_and_reasons() -> None:
    params = IN * OUT + OUT
    full = refprobe.estimate_meta(LINEAR, "t", {"ROWS": 8})
    assert full == refprobe.MetaEstimate(True, 8 * IN, params, 8 * OUT, 2 * 8 * IN * OUT, True)
    fast = refprobe.estimate_meta(ITEM_IN_FORWARD, "t", {}, forward=False)
    assert fast == refprobe.MetaEstimate(True, ROWS * IN, params)

    built = refprobe.estimate_meta(ITEM_IN_INIT, "t", {})
    assert not built.ok and built.reason.startswith("build failed on meta: RuntimeError: ")
    body = refprobe.estimate_meta(LINEAR, "t", {"NO_SUCH": 1})  # the override names no constant
    assert not body.ok and body.reason.startswith("build failed on meta: TaskError: ")

    shape = refprobe.estimate_meta(ITEM_IN_FORWARD, "t", {})
    assert shape.ok and not shape.forward_ok and not shape.meta_unsupported
    assert (shape.input_numel, shape.param_numel, shape.output_numel, shape.flops) == (
        ROWS * IN,
        params,
        0,
        0,
    )
    assert shape.reason.startswith("forward failed on meta: RuntimeError: ")
    kernel = refprobe.estimate_meta(NO_META_KERNEL, "t", {})
    assert kernel.ok and not kernel.forward_ok and kernel.meta_unsupported
    assert kernel.reason == "forward failed on meta: NotImplementedError: no meta kernel for my_op"


def test_memory_need_sizes_inputs_alone_when_the_model_or_its_forward_fails() -> None:
    base = 256 << 20
    inputs, params = ROWS * IN * 4, (IN * OUT + OUT) * 4
    assert sharing.memory_need_bytes(_task(ITEM_IN_INIT)) == 10 * inputs + base
    assert sharing.memory_need_bytes(_task(ITEM_IN_FORWARD)) == 10 * inputs + 2 * params + base
    assert sharing.memory_need_bytes(_task(LINEAR)) == 10 * (inputs + ROWS * OUT * 4) + 2 * params + base
    # Buffers count with the parameters: weight, bias, running mean, running var (fp32), num_batches_tracked.
    state = 4 * 256 * 4 + 8
    assert sharing.memory_need_bytes(_task(BATCHNORM)) == 10 * 1024 * 256 * 4 + 2 * state + base
