"""The static verdict on a candidate, shared by the parent (before spawning) and the worker (defence in depth).

Torch-free: the parent rejects syntax errors, static-check violations and CUDA candidates on a CPU run
without paying for a worker process (≈3 s of torch import each).
"""

from __future__ import annotations

from importlib import metadata

from htam_graph.kernels_runtime import static_checks
from htam_graph.kernels_runtime.recorder import Recorder
from htam_graph.model import ErrorKind, EvalRequest, EvalResult

__all__ = ["StaticRejection", "static_verdict", "precheck"]


class StaticRejection(Exception):
    """The source is rejected before it runs."""

    def __init__(self, kind: ErrorKind, check: str | None, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.check = check


def static_verdict(req: EvalRequest, rec: Recorder) -> static_checks.StaticReport:
    """Analyse the candidate, record `static_source` and the language; raise StaticRejection on a verdict."""
    report = static_checks.analyse(req.candidate_source, req.precision_policy, req.candidate_kind == "kernel")
    rec.set(language=report.language)
    if report.syntax_error:
        raise StaticRejection(ErrorKind.COMPILE_ERROR, None, report.syntax_error)
    if not report.defines_model_new:
        raise StaticRejection(ErrorKind.COMPILE_ERROR, None, "the candidate does not define a class ModelNew")
    if report.violations:
        raise StaticRejection(ErrorKind.HACK_DETECTED, "static_source", "; ".join(report.violations))
    kind_note = (
        "kernel required" if req.candidate_kind == "kernel" else "reference track: kernel not required"
    )
    rec.ok("static_source", kind_note)
    if req.device == "cpu" and report.needs_cuda_build:
        raise StaticRejection(
            ErrorKind.UNSUPPORTED_ON_DEVICE,
            None,
            "CUDA C++ (torch.utils.cpp_extension) candidates need a GPU; not compiled",
        )
    return report


def _torch_version() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return ""


def precheck(req: EvalRequest) -> EvalResult | None:
    """The final result when the source is rejected statically, else None (the worker must run it)."""
    rec = Recorder(req)
    try:
        static_verdict(req, rec)
    except StaticRejection as r:
        rec.set(
            torch_version=_torch_version(),
            timing_on_cpu=req.device == "cpu",
            gpu_arch="cpu" if req.device == "cpu" else "",
        )
        rec.fail(r.kind, str(r), r.check)
        return rec.result()
    return None
