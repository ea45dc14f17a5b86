"""Accumulates one evaluation's fields and named checks, and turns them into an `EvalResult`."""

from __future__ import annotations

from typing import Any

from htam_graph.model import ErrorKind, EvalRequest, EvalResult, PrecisionPolicy

__all__ = ["ALL_CHECKS", "Recorder", "phase_seconds", "queued_seconds", "tolerances"]

# Every named defence, in pipeline order. A check the pipeline did not reach is recorded as skipped, so a
# result always says which defences stood behind it.
ALL_CHECKS = (
    "static_source",
    "tf32_pinned_off",
    "timer_identity",
    "harness_identity",
    "reference_kept_alive_and_poisoned",
    "inputs_unchanged",
    "plain_tensor_output",
    "kernel_launched",
    "correctness",
    "extra_shapes",
    "task_configs",
    "deterministic_rerun",
    "output_not_trivial",
    "tiny_output_tolerance",
    "caller_stream",
    "device_sync",
    "recheck_after_timing",
    "speed_of_light",
)

_POLICY_TOLERANCE = {
    PrecisionPolicy.FP32_STRICT: (1e-4, 1e-4),
    PrecisionPolicy.TF32: (1e-2, 1e-2),
    PrecisionPolicy.BF16: (1e-2, 1e-2),
}


def tolerances(request: EvalRequest) -> tuple[float, float]:
    """(rtol, atol): the request's overrides, else the policy's defaults (KernelBench: fp32 1e-4)."""
    rtol, atol = _POLICY_TOLERANCE[request.precision_policy]
    return (
        request.rtol if request.rtol is not None else rtol,
        request.atol if request.atol is not None else atol,
    )


class Recorder:
    """Mutable builder of one result. The first failure wins; later checks are recorded as not reached."""

    def __init__(self, request: EvalRequest) -> None:
        rtol, atol = tolerances(request)
        self.fields: dict[str, Any] = {
            "compiled": False,
            "correct": False,
            "device": request.device,
            "precision_policy": request.precision_policy,
            "rtol": rtol,
            "atol": atol,
            "shape_variant": request.shape,
        }
        self.checks: dict[str, str] = {}

    @property
    def rtol(self) -> float:
        return float(self.fields["rtol"])

    @property
    def atol(self) -> float:
        return float(self.fields["atol"])

    def set(self, **values: Any) -> None:
        self.fields.update(values)

    def ok(self, name: str, note: str = "") -> None:
        self.checks[name] = f"pass: {note}" if note else "pass"

    def fail_check(self, name: str, why: str) -> None:
        self.checks[name] = f"fail: {why}"

    def skip(self, name: str, why: str) -> None:
        self.checks[name] = f"skipped: {why}"

    def info(self, name: str, note: str) -> None:
        self.checks[name] = f"info: {note}"

    def fail(self, kind: ErrorKind, excerpt: str, check: str | None = None) -> None:
        """Record the verdict (first failure wins)."""
        if self.fields.get("error_kind") is not None:
            return
        self.fields["error_kind"] = kind
        self.fields["error_excerpt"] = excerpt[:2000]
        self.fields["correct"] = False
        if check is not None and not self.checks.get(check, "").startswith("fail"):
            self.fail_check(check, excerpt.splitlines()[0][:300] if excerpt else kind.value)

    @property
    def failed(self) -> bool:
        return self.fields.get("error_kind") is not None

    def result(self) -> EvalResult:
        for name in ALL_CHECKS:
            if name not in self.checks:
                self.skip(name, "not reached (an earlier step failed)" if self.failed else "not applicable")
        ordered = {name: self.checks[name] for name in ALL_CHECKS}
        ordered.update({k: v for k, v in self.checks.items() if k not in ordered})  # info entries last
        return EvalResult(**self.fields, checks=ordered)


def phase_seconds(checks: dict[str, str]) -> dict[str, float]:
    """A result's `phase_s` info entry ("info: variants 0.2, correctness 3.1, correctness.trials 2.0, ...",
    written by the worker's harness) as {phase: seconds}; a name "a.b" is a part of phase "a"."""
    out = {}
    for part in filter(
        None, (p.strip() for p in checks.get("phase_s", "").removeprefix("info: ").split(","))
    ):
        name, _, value = part.rpartition(" ")
        out[name] = float(value)
    return out


def queued_seconds(checks: dict[str, str]) -> tuple[float, dict[str, float]]:
    """A result's `queued_s` info entry ("info: 21.890 in 6 waits: memory 10.100, timing 11.790", written by
    the worker's harness) as (total seconds, {what was waited for: seconds}); (0, {}) when the worker never
    waited. Records written before the kinds were kept have the total only."""
    total, _, kinds = checks.get("queued_s", "").removeprefix("info: ").partition(":")
    by_kind = {}
    for part in filter(None, (p.strip() for p in kinds.split(","))):
        name, _, value = part.rpartition(" ")
        by_kind[name] = float(value)
    words = total.split()
    return (float(words[0]) if words else 0.0), by_kind
