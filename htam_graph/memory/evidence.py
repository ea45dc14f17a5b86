"""What one attempt counts for in the statistics (pure functions of the AttemptRecord).

- positive iff status == "improved", compiled, correct, no error kind (so never `hack_detected`) and gain > 0;
  everything else is negative evidence for the local strategy it applied;
- counted gain = `gain` when the attempt is correct, clean and not failed, else 0.0 (a failure adds a count
  and no gain, so it lowers the mean);
- compile failure iff not compiled;
- an attempt that ran on the CPU (Triton interpreted: correctness only, timings meaningless) or failed for
  infrastructure reasons is recorded (Attempt, Kernel, links) but is never evidence: it adds no statistics and
  is never an example, so nothing measured by the interpreter weighs in a GPU decision.
"""

from __future__ import annotations

from htam_graph.memory.common import CPU_ARCH
from htam_graph.model import AttemptRecord, ErrorKind

__all__ = ["counted_gain", "is_evidence", "is_positive", "ran_on_cpu"]


def is_positive(record: AttemptRecord) -> bool:
    """Positive evidence: improved and passed every hardened check. Any failure or hack is negative."""
    return (
        record.status == "improved"
        and record.compiled
        and record.correct
        and record.error_kind is None
        and record.gain > 0.0
    )


def ran_on_cpu(record: AttemptRecord) -> bool:
    """The attempt was evaluated on the CPU (Triton's interpreter): its device says so, or, on records
    written without a device, its architecture 'cpu'."""
    return record.device == "cpu" or record.gpu_arch == CPU_ARCH


def is_evidence(record: AttemptRecord) -> bool:
    """Whether the attempt says anything about its strategy on a GPU. An infrastructure failure (the harness
    ran out of GPU memory, the worker could not start) is not the strategy's failure (evaluation.md pitfall
    19), and a CPU attempt ran interpreted Triton, whose speed says nothing about a GPU: both are recorded as
    Attempts but add no statistics."""
    return record.error_kind is not ErrorKind.INFRA_ERROR and not ran_on_cpu(record)


def counted_gain(record: AttemptRecord) -> float:
    """The gain added to the sums: the attempt's gain when it is correct and clean, else 0.0."""
    clean = record.correct and record.compiled and record.error_kind is None and record.status != "failed"
    return float(record.gain) if clean else 0.0
