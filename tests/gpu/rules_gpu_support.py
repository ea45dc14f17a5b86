"""Shared scaffolding of the rules-library GPU tests (tests/gpu/test_rules_*_gpu.py).

Imported as `from tests.gpu.rules_gpu_support import ...` (tests/gpu/conftest.py registers it under that name,
so the import works under `--import-mode=importlib` on every pytest version). Loaded by path, it is not
assertion-rewritten by pytest: every assert here carries its own message. The CPU test
tests/integration/test_rules_gpu_support.py runs the same helpers with `device="cpu"` under TRITON_INTERPRET=1,
so this scaffolding is exercised in CI.

What a case checks (`check_case`): Model and ModelNew are built with the same seed on `device` (the weights must
be identical), TF32 off (`fp32_strict`), both are run on the task's own inputs and on a transformed copy, and
every output must match: same type, shape, dtype and device, allclose(rtol=1e-4, atol=1e-4), or exact equality
for integer outputs (indices) when asked. `time_checked` then times both (triton.testing.do_bench medians on CUDA;
wall-clock medians on the CPU, meaningless under the interpreter): information, never an assertion.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from htam_graph.kernels_runtime.worker.execution import CandidateFailure, load_candidate
from htam_graph.kernels_runtime.worker.taskmod import load_task_module
from htam_graph.model import Task
from htam_graph.rules import KernelConfig
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
RTOL = ATOL = 1e-4  # fp32-strict: never loosened

Transform = Callable[[torch.Tensor], torch.Tensor]

# The marks of every rules GPU test file; FP32_STRICT (tests/gpu/conftest.py) turns TF32 off for each test.
GPU_MARKS = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
FP32_STRICT = pytest.mark.usefixtures("fp32_strict_cuda")


def make_task(rel: str, *, suite: str = "kernelbench", kb: Path = KB) -> Task:
    """The KernelBench task at `kb / rel` (e.g. "level1/22_Tanh.py")."""
    source = (kb / rel).read_text(encoding="utf-8")
    return Task(
        key=f"kernelbench/{rel[:-3]}",
        suite=suite,
        level=None,
        name=rel,
        source=source,
        source_sha256="0" * 64,
    )


def generate(task: Task, key: str, config: KernelConfig | None = None) -> str:
    """The source recipe `key` emits for `task` (its default config unless `config` is given)."""
    recipe = default_recipes()[key]
    return recipe.emit(task_view(task), recipe.default_config if config is None else config)


def import_candidate(source: str, directory: Path) -> ModuleType:
    """Import a generated source with the runtime's own loader (`load_candidate`: a real file under `directory`,
    since @triton.jit reads the function's source; no size overrides). A candidate that does not load, or
    defines no class ModelNew, fails the test with the runtime's classification and message."""
    try:
        module: ModuleType = load_candidate(source, directory, {})[0]
    except CandidateFailure as failure:
        pytest.fail(
            f"the candidate did not load ({failure.kind}): {failure}\n{failure.excerpt}", pytrace=False
        )
    sys.modules.pop(module.__name__, None)  # load_candidate leaves it registered; keep tests independent
    return module


@contextmanager
def fp32_strict() -> Iterator[None]:
    """TF32 off for cuBLAS and cuDNN inside the block; the previous switches are restored after it."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def synchronize(device: str) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def signed(x: torch.Tensor) -> torch.Tensor:
    """In place: x * 6 - 3 (reaches the negative branches of activations)."""
    return x.mul_(6).sub_(3)


def signed_offset(x: torch.Tensor) -> torch.Tensor:
    """In place: x * 6 - 3 + 10 (a large mean: exposes E[x^2] - E[x]^2 cancellation)."""
    return x.mul_(6).sub_(3).add_(10)


def transformed(inputs: Sequence[torch.Tensor], transform: Transform) -> list[torch.Tensor]:
    """`transform` applied to the floating-point inputs; integer inputs are kept as they are."""
    return [transform(x) if x.is_floating_point() else x for x in inputs]


@dataclass
class Models:
    """The reference module (with its get_inputs), Model and ModelNew, built with the same seed."""

    ref_mod: ModuleType
    model: torch.nn.Module
    model_new: torch.nn.Module


def build_models(
    task: Task,
    candidate_source: str,
    directory: Path,
    *,
    device: str = "cuda",
    overrides: dict[str, Any] | None = None,
) -> Models:
    """Model and ModelNew on `device`, each built right after seed 0; their state dicts must be identical."""
    ref_mod = load_task_module(task.source, "reference", overrides or {})
    cand = import_candidate(candidate_source, directory)
    init = list(ref_mod.get_init_inputs())
    with torch.device(device):
        torch.manual_seed(0)
        model = ref_mod.Model(*init)
        torch.manual_seed(0)
        model_new = cand.ModelNew(*init)
    ref_state, new_state = model.state_dict(), model_new.state_dict()
    assert list(ref_state) == list(new_state), (
        f"state dict keys differ: {list(ref_state)} vs {list(new_state)}"
    )
    differ = [k for k in ref_state if not torch.equal(ref_state[k], new_state[k])]
    assert not differ, f"weights differ after the same seed: {differ}"
    return Models(ref_mod, model, model_new)


def draw_inputs(
    ref_mod: ModuleType, *, device: str = "cuda", seed: int = 1, on_host: bool = False
) -> list[torch.Tensor]:
    """The task's get_inputs() after `seed`: drawn on `device`, or on the host and then moved (`on_host`)."""
    if on_host:
        torch.manual_seed(seed)
        return [x.to(device) for x in ref_mod.get_inputs()]
    with torch.device(device):
        torch.manual_seed(seed)
        return list(ref_mod.get_inputs())


@dataclass
class Comparison:
    """How far an output is from the reference: max |got - ref| and max(|got - ref| / (atol + rtol |ref|))."""

    max_abs_err: float = 0.0
    err_over_tol: float = 0.0

    def worst(self, other: Comparison) -> Comparison:
        return Comparison(
            max(self.max_abs_err, other.max_abs_err), max(self.err_over_tol, other.err_over_tol)
        )


def compare_outputs(
    got: Any,
    expected: torch.Tensor,
    *,
    device: str = "cuda",
    exact_integers: bool = False,
    check_strides: bool = False,
    measure_err_over_tol: bool = False,
) -> Comparison:
    """Assert that ModelNew's output matches the reference's (see the module docstring) and say how closely.

    exact_integers: integer outputs (argmin/argmax indices) must be equal, not merely close.
    check_strides: the output's strides must equal the reference's (same memory format).
    measure_err_over_tol: also compute err_over_tol (one more output-sized temporary; 0.0 otherwise).
    """
    assert type(got) is torch.Tensor, f"ModelNew returned {type(got).__name__}, not a tensor"
    assert got.shape == expected.shape, f"shape {tuple(got.shape)} != reference {tuple(expected.shape)}"
    assert got.dtype == expected.dtype, f"dtype {got.dtype} != reference {expected.dtype}"
    assert got.device.type == torch.device(device).type, f"output on {got.device}, expected {device}"
    if check_strides:
        assert got.stride() == expected.stride(), f"strides {got.stride()} != reference {expected.stride()}"
    if exact_integers and not expected.is_floating_point():
        assert torch.equal(got, expected), "indices differ"
        return Comparison()
    diff = (got - expected).abs()
    result = Comparison(max_abs_err=diff.max().item())
    if measure_err_over_tol:
        result.err_over_tol = (diff / (ATOL + RTOL * expected.abs())).max().item()
    assert torch.allclose(got, expected, rtol=RTOL, atol=ATOL), (
        f"max abs error {result.max_abs_err}, err/tol {result.err_over_tol}"
        if measure_err_over_tol
        else f"max abs error {result.max_abs_err}"
    )
    return result


def run_both(
    model: torch.nn.Module,
    model_new: torch.nn.Module,
    inputs: Sequence[torch.Tensor],
    *,
    device: str = "cuda",
    forward_seed: int | None = None,
) -> tuple[Any, Any]:
    """(reference output, ModelNew output) without grad; each forward right after `forward_seed` if given
    (training-mode dropout then draws the same mask in both)."""
    with torch.no_grad():
        if forward_seed is not None:
            torch.manual_seed(forward_seed)
        expected = model(*inputs)
        if forward_seed is not None:
            torch.manual_seed(forward_seed)
        got = model_new(*inputs)
    synchronize(device)
    return expected, got


@dataclass(frozen=True)
class CheckOptions:
    """How `check_case` checks a task (each GPU test file declares its own once).

    transform: applied in place to the floating-point inputs for the second trial.
    forward_seeds: each forward of trial t runs right after seed 10 + t (training-mode dropout draws the same
    mask in both models).
    exact_integers, check_strides, measure_err_over_tol: those of `compare_outputs`.
    """

    transform: Transform = signed
    exact_integers: bool = False
    check_strides: bool = False
    forward_seeds: bool = False
    measure_err_over_tol: bool = False


@dataclass
class Checked:
    """A case that passed: the models, the last inputs they ran on and the worst errors seen."""

    models: Models
    inputs: list[torch.Tensor]
    comparison: Comparison


def check_case(
    task: Task,
    candidate_source: str,
    directory: Path,
    options: CheckOptions = CheckOptions(),
    *,
    device: str = "cuda",
    overrides: dict[str, Any] | None = None,
) -> Checked:
    """ModelNew against Model on the task's own inputs (seed 1), then on `options.transform` of them."""
    models = build_models(task, candidate_source, directory, device=device, overrides=overrides)
    inputs = draw_inputs(models.ref_mod, device=device)
    worst = Comparison()
    for trial in range(2):
        if trial == 1:
            inputs = transformed(inputs, options.transform)
        expected, got = run_both(
            models.model,
            models.model_new,
            inputs,
            device=device,
            forward_seed=10 + trial if options.forward_seeds else None,
        )
        worst = worst.worst(
            compare_outputs(
                got,
                expected,
                device=device,
                exact_integers=options.exact_integers,
                check_strides=options.check_strides,
                measure_err_over_tol=options.measure_err_over_tol,
            )
        )
        del expected, got
    return Checked(models, inputs, worst)


def time_call(fn: Callable[[], Any], *, device: str = "cuda", cpu_reps: int = 3) -> float:
    """Median milliseconds of `fn()`: triton.testing.do_bench on CUDA, `cpu_reps` wall-clock calls on the CPU."""
    with torch.no_grad():
        if torch.device(device).type == "cuda":
            import triton.testing

            return float(triton.testing.do_bench(fn, return_mode="median"))
        times = []
        for _ in range(cpu_reps):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)


@dataclass
class CaseResult:
    """A checked and timed case (timings are information, not assertions)."""

    max_abs_err: float
    err_over_tol: float
    kernel_ms: float
    eager_ms: float

    @property
    def speedup(self) -> float:
        return self.eager_ms / self.kernel_ms

    def summary(self) -> str:
        """`eager_ms=.. kernel_ms=.. speedup=..x max_abs_err=..`, the fields of the RULES_GPU lines."""
        return (
            f"eager_ms={self.eager_ms:.4f} kernel_ms={self.kernel_ms:.4f} speedup={self.speedup:.3f}x"
            f" max_abs_err={self.max_abs_err:.2e}"
        )


def time_checked(checked: Checked, *, device: str = "cuda") -> CaseResult:
    """Time ModelNew, then Model, on the inputs the check ended with."""
    model, model_new, inputs = checked.models.model, checked.models.model_new, checked.inputs
    kernel_ms = time_call(lambda: model_new(*inputs), device=device)
    eager_ms = time_call(lambda: model(*inputs), device=device)
    return CaseResult(checked.comparison.max_abs_err, checked.comparison.err_over_tol, kernel_ms, eager_ms)


def run_case(
    task: Task,
    candidate_source: str,
    directory: Path,
    options: CheckOptions = CheckOptions(),
    *,
    device: str = "cuda",
    overrides: dict[str, Any] | None = None,
) -> CaseResult:
    """`check_case`, then `time_checked` on the same device."""
    checked = check_case(task, candidate_source, directory, options, device=device, overrides=overrides)
    return time_checked(checked, device=device)


def report(label: str, *words: object, result: CaseResult, extra: str = "") -> None:
    """Print `\\n<label> <words...> <result.summary()><extra>` (read with pytest -s)."""
    print(f"\n{label} {' '.join(str(w) for w in words)} {result.summary()}{extra}")
