"""Loading and calling the two sides inside the worker: task module, candidate module, models, inputs.

Every call into candidate code goes through `candidate_call`, which turns any exception into a
`CandidateFailure` with an error kind and a short excerpt. Failures of the reference are `HarnessFailure`
(infra_error): a reference that cannot run is never the candidate's fault.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch

from htam_graph.kernels_runtime.worker import taskmod
from htam_graph.kernels_runtime.worker.excerpt import exception_excerpt
from htam_graph.model import ErrorKind

__all__ = [
    "CandidateFailure",
    "HarnessFailure",
    "load_candidate",
    "candidate_call",
    "make_inputs",
    "build_models",
    "sync",
    "temporary_globals",
]

T = TypeVar("T")


class CandidateFailure(Exception):
    """The candidate failed: a verdict on it, recorded as data."""

    def __init__(self, kind: ErrorKind, check: str | None, message: str, excerpt: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.check = check  # the named check that failed, if any
        self.excerpt = excerpt or message
        self.max_abs_err: float | None = None  # set on a tolerance mismatch
        self.max_rel_err: float | None = None


class HarnessFailure(Exception):
    """The harness or the task's reference failed (infra_error), not the candidate."""


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _is_compile_error(e: BaseException) -> bool:
    """Triton compilation errors surface at the first call; they are compile errors, not runtime ones."""
    names = {cls.__name__ for cls in type(e).__mro__}
    module = type(e).__module__ or ""
    return "CompilationError" in names or module.startswith("triton.compiler")


def classify(e: BaseException) -> ErrorKind:
    """Error kind of an exception raised by candidate code while it ran."""
    if isinstance(e, torch.OutOfMemoryError):
        # Out of device memory is classified apart (evaluation.md pitfall 19): with several evaluations
        # sharing a GPU it says more about the machine than about the candidate.
        return ErrorKind.INFRA_ERROR
    return ErrorKind.COMPILE_ERROR if _is_compile_error(e) else ErrorKind.RUNTIME_ERROR


def candidate_call(fn: Callable[[], T], candidate_file: str | None, what: str) -> T:
    """Run candidate code; any exception (SystemExit included) becomes a CandidateFailure."""
    try:
        return fn()
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - everything the candidate raises is a verdict on it
        kind = classify(e)
        raise CandidateFailure(
            kind, None, f"{what}: {type(e).__name__}: {e}", exception_excerpt(e, candidate_file)
        ) from e


def _candidate_overrides(
    tree: ast.Module, overrides: Mapping[str, taskmod.OverrideValue]
) -> dict[str, taskmod.OverrideValue]:
    """The variant's size overrides that also name integer constants of the candidate (same kind of value)."""
    constants = taskmod.module_constants(tree)
    usable: dict[str, taskmod.OverrideValue] = {}
    for name, value in overrides.items():
        original = constants.get(name)
        scalar = isinstance(value, int) and isinstance(original, int) and not isinstance(original, bool)
        sequence = (
            isinstance(value, tuple)
            and isinstance(original, tuple | list)
            and len(original) == len(value)
            and all(isinstance(v, int) for v in original)
        )
        if scalar or sequence:
            usable[name] = value
    return usable


def load_candidate(
    source: str, workdir: Path, overrides: Mapping[str, taskmod.OverrideValue]
) -> tuple[types.ModuleType, str]:
    """Write the candidate to a file and import it as a module (inspect and tracebacks see real lines).

    Size constants the candidate shares with the task are overridden like the task's (a candidate reading the
    task's sizes by name follows the variant; hard-coded literals do not). Raises CandidateFailure
    (compile_error) when the module does not load.
    """
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    path = workdir / f"candidate_{digest}.py"
    path.write_text(source, encoding="utf-8")
    name = f"htam_candidate_{digest}"
    try:
        tree = ast.parse(source, filename=str(path))
        usable = _candidate_overrides(tree, overrides)
        if usable:
            tree = taskmod.apply_overrides(tree, usable)
        code = compile(tree, str(path), "exec")
    except SyntaxError as e:
        raise CandidateFailure(
            ErrorKind.COMPILE_ERROR, None, f"SyntaxError: {e.msg} (line {e.lineno})"
        ) from e
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton and dataclasses look the module up while it executes
    try:
        exec(code, module.__dict__)  # noqa: S102 - executing the candidate is the point of the worker
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001
        raise CandidateFailure(
            ErrorKind.COMPILE_ERROR,
            None,
            f"the candidate module failed to load: {type(e).__name__}: {e}",
            exception_excerpt(e, str(path)),
        ) from e
    if not isinstance(getattr(module, "ModelNew", None), type):
        raise CandidateFailure(
            ErrorKind.COMPILE_ERROR, None, "the candidate does not define a class ModelNew"
        )
    return module, str(path)


@contextlib.contextmanager
def temporary_globals(module: types.ModuleType, values: Mapping[str, Any]) -> Iterator[None]:
    """Set module globals that already exist (a variant's sizes) and restore them afterwards."""
    saved = {k: module.__dict__[k] for k in values if k in module.__dict__}
    module.__dict__.update(
        {k: (list(v) if isinstance(saved[k], list) else v) for k, v in values.items() if k in saved}
    )
    try:
        yield
    finally:
        module.__dict__.update(saved)


def _to_device(values: Sequence[Any], device: torch.device) -> list[Any]:
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def make_inputs(task: types.ModuleType, seed: int, device: torch.device) -> list[Any]:
    """`get_inputs()` under `seed`, created directly on `device` (no multi-GB host copies at default sizes)."""
    try:
        torch.manual_seed(seed)
        with torch.device(device):
            return _to_device(list(task.get_inputs()), device)
    except Exception as e:
        raise HarnessFailure(f"the task's get_inputs() failed: {type(e).__name__}: {e}") from e


def _sync_weights(ref: torch.nn.Module, cand: Any) -> tuple[int, int]:
    """Copy reference parameters/buffers into same-named, same-shaped candidate ones: (copied, candidate total)."""
    if not isinstance(cand, torch.nn.Module):
        return 0, 0
    cand_state = cand.state_dict()
    ref_state = ref.state_dict()
    same = {k: v for k, v in ref_state.items() if k in cand_state and cand_state[k].shape == v.shape}
    if same:
        with torch.no_grad():
            cand.load_state_dict(same, strict=False)
    return len(same), len(cand_state)


def build_models(
    task: types.ModuleType, candidate: types.ModuleType, seed: int, device: torch.device, candidate_file: str
) -> tuple[torch.nn.Module, Any, str]:
    """Construct `Model` and `ModelNew` from the same init inputs, each right after `torch.manual_seed(seed)`
    (identical initialisation when the structure matches), then copy same-named weights. Returns a note."""
    try:
        torch.manual_seed(seed)
        with torch.device(device):
            init = list(task.get_init_inputs())
        torch.manual_seed(seed)
        with torch.device(device):
            ref = task.Model(*init).to(device)
    except Exception as e:
        raise HarnessFailure(f"the reference Model could not be built: {type(e).__name__}: {e}") from e

    def construct() -> Any:
        torch.manual_seed(seed)
        with torch.device(device):
            model = candidate.ModelNew(*init)
        return model.to(device) if isinstance(model, torch.nn.Module) else model

    cand = candidate_call(construct, candidate_file, "ModelNew(*get_init_inputs()) raised")
    copied, total = candidate_call(
        lambda: _sync_weights(ref, cand), candidate_file, "loading reference weights raised"
    )
    return ref, cand, f"{copied}/{total} candidate tensors copied from the reference state_dict"
