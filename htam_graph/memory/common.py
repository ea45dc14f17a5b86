"""Names and small helpers the seeding, recording and reading modules share: the reserved GPU architecture
keys, the batch size, the Kernel key of an attempt and the wall clock."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from htam_graph.model import AttemptRecord

__all__ = [
    "BATCH_SIZE",
    "CPU_ARCH",
    "PRIOR_ARCH",
    "UNKNOWN_ARCH",
    "arch_of",
    "drop_none",
    "kernel_key",
    "now_ms",
]

PRIOR_ARCH = "prior"  # gpu_arch of the seed's prior TRANSITION edges; reserved
UNKNOWN_ARCH = "unknown"  # gpu_arch recorded when an attempt names none
CPU_ARCH = "cpu"  # gpu_arch of an attempt evaluated on the CPU (never evidence)
BATCH_SIZE = 1000  # rows per statement when recording or repairing


def arch_of(record: AttemptRecord) -> str:
    """The GPU architecture evidence is filed under ('unknown' when the attempt names none)."""
    return record.gpu_arch or UNKNOWN_ARCH


def kernel_key(record: AttemptRecord) -> str | None:
    """The Kernel node key: the given sha256, else the sha256 of the source, else None (no kernel)."""
    if record.kernel_sha256:
        return record.kernel_sha256
    if record.kernel_source is not None:
        return hashlib.sha256(record.kernel_source.encode("utf-8")).hexdigest()
    return None


def now_ms() -> int:
    """Wall-clock epoch milliseconds (time is always written from Python)."""
    return int(time.time() * 1000)


def drop_none(values: dict[str, Any]) -> dict[str, Any]:
    """`values` without its None entries (a property set to null is removed, so it is never written)."""
    return {k: v for k, v in values.items() if v is not None}
