"""The HTG memory over the `GraphStore` port: seeding, recording attempt outcomes, and reading directions,
strategies, examples and policy scores. Orchestration only: every statement is a named `.cypher` file run
through the port; per-attempt values (polarity, counted gain) are computed in Python, per-key sums inside each
statement.

    seeding.py    the seed file's globals, locals and prior transitions (idempotent, keeps the evidence)
    evidence.py   what one attempt counts for (positive, counted gain, never evidence on the CPU)
    recording.py  Attempt records and the statistics they add, crash-safe (`Recorder`)
    repair.py     completing what a killed writer left pending; moving CPU evidence out
    reading.py    directions, locals with evidence, examples, summaries, direction scores
    common.py     reserved architecture keys, kernel keys, the clock

Stats are sums and counts (means derived on read), kept in totals on the nodes and per GPU architecture on
STATS_ON / EVIDENCE_ON edges to `(:Gpu)` and on one TRANSITION edge per (src, dst, gpu_arch). The names below
are the public API (`from htam_graph import memory; memory.record_attempts(...)`).
"""

from htam_graph.memory.common import (
    BATCH_SIZE,
    CPU_ARCH,
    PRIOR_ARCH,
    UNKNOWN_ARCH,
    arch_of,
    kernel_key,
    now_ms,
)
from htam_graph.memory.evidence import counted_gain, is_evidence, is_positive, ran_on_cpu
from htam_graph.memory.reading import (
    MemorySummary,
    TransitionSummary,
    directions,
    examples_for,
    locals_for,
    memory_summary,
    score_directions,
    similar_attempts,
    with_outcomes,
)
from htam_graph.memory.recording import (
    PENDING_STEPS,
    Recorder,
    check_keys,
    record_attempt,
    record_attempts,
    record_run,
)
from htam_graph.memory.repair import repair_cpu_evidence, repair_pending
from htam_graph.memory.seeding import SeedCounts, ensure_seeded, seed_digest, seed_memory

__all__ = [
    "BATCH_SIZE",
    "CPU_ARCH",
    "PENDING_STEPS",
    "PRIOR_ARCH",
    "UNKNOWN_ARCH",
    "MemorySummary",
    "Recorder",
    "SeedCounts",
    "TransitionSummary",
    "arch_of",
    "check_keys",
    "counted_gain",
    "directions",
    "ensure_seeded",
    "examples_for",
    "is_evidence",
    "is_positive",
    "kernel_key",
    "locals_for",
    "memory_summary",
    "now_ms",
    "ran_on_cpu",
    "record_attempt",
    "record_attempts",
    "record_run",
    "repair_cpu_evidence",
    "repair_pending",
    "score_directions",
    "seed_digest",
    "seed_memory",
    "similar_attempts",
    "with_outcomes",
]
