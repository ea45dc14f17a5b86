"""How evaluations share a GPU with other bench workers: device-memory needs, locks around device work, cache.

The locks and the ledger are `gpulock`'s; this module decides what an evaluation asks of them. Sizes come from the
meta device (no memory, no arithmetic), so a default-size task is sized in milliseconds before anything runs.
"""

from __future__ import annotations

import contextlib
import types

import torch

from htam_graph.kernels_runtime import gpulock
from htam_graph.kernels_runtime.worker import checks, refprobe

__all__ = ["exclusive", "input_elements", "memory_need_bytes", "meta_inputs", "release_cache", "shared"]


def meta_inputs(task: types.ModuleType) -> list[torch.Tensor] | None:
    """The task's input tensors built on the meta device (no memory, no time); None if that fails."""
    inputs, _ = refprobe.build_meta_inputs(task)
    return None if inputs is None else [x for x in inputs if isinstance(x, torch.Tensor)]


def input_elements(task: types.ModuleType) -> int:
    """Total element count of the task's inputs (meta device); -1 if unknown."""
    inputs = meta_inputs(task)
    return -1 if inputs is None else sum(x.numel() for x in inputs)


def shared(device: torch.device) -> contextlib.AbstractContextManager[None]:
    """Device work beside other workers' (gpulock.shared_use); on the CPU there is no GPU to coordinate."""
    return gpulock.shared_use(device.index or 0) if device.type == "cuda" else contextlib.nullcontext()


def exclusive(device: torch.device) -> contextlib.AbstractContextManager[None]:
    """The timed loop, alone on its GPU (gpulock.timing_lock). CPU timings are never claims (flagged
    `timing_on_cpu`), and serialising CPU workers behind each other's interpreted correctness runs would only
    slow a CPU bench down."""
    return gpulock.timing_lock(device.index or 0) if device.type == "cuda" else contextlib.nullcontext()


def release_cache(device: torch.device) -> None:
    """Hand cached, unused device memory back between phases of different sizes (shape variants, trials, timing).

    Without it the caching allocator kept blocks of every size it had seen: an H200 evaluation of a 6.4 GB
    elementwise task peaked at 135.6 GiB reserved, far above what it held at any moment, and starved the other
    evaluations the memory budget had admitted next to it."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def memory_need_bytes(task: types.ModuleType) -> int:
    """Device memory one evaluation of the task is expected to peak at, for the GPU memory budget.

    Sized on the meta device (`refprobe.meta_forward`: no memory, no arithmetic) as 10x (inputs + reference
    output) + 2x (parameters + buffers): an evaluation holds the first trial's inputs and output, the current
    trial's inputs, clones and outputs, allocator poison of twice (inputs + output) and comparison
    temporaries.
    Measured on the H200 (the `device_memory` info entry of every CUDA result): 8x for 6.4 GB elementwise and
    norm tasks, 10x for pooling and transposed convolutions, where the output is small next to the input.
    """
    run = refprobe.meta_forward(task)
    inputs = [x for x in run.inputs or [] if isinstance(x, torch.Tensor)]
    model = run.model
    state = list(model.parameters()) + list(model.buffers()) if isinstance(model, torch.nn.Module) else []
    out_bytes = checks.nbytes(run.output)  # 0 when the meta forward failed (no meta kernel): inputs alone
    return 10 * (checks.nbytes(inputs) + out_bytes) + 2 * checks.nbytes(state) + (256 << 20)
