"""What a memory bank holds, as one comparable value: counts per label and relationship type, and every stat
the policy reads (sums rounded to 1e-9). Two graphs holding the same bank give equal values on either engine.

Loaded by path (`load_sibling("bank_stats")`, see sibling_module.py): pytest runs with --import-mode=importlib.
"""

from __future__ import annotations

from typing import Any

from htam_graph import memory

# nodes that are not memory: bookkeeping of the graph (seed, schema) and the Neo4j test database's marker
NOT_MEMORY = {"SeedInfo", "SchemaVersion", "HtamTestMarker"}


def stats(store: Any) -> dict[str, Any]:
    """Counts per label/type plus every stat the policy reads (sums rounded to 1e-9)."""

    def rows(text: str) -> list[Any]:
        return sorted(
            tuple(round(v, 9) if isinstance(v, float) else v for v in r.values())
            for r in store.run_text(text)
        )

    summary = memory.memory_summary(store)
    return {
        "labels": {k: v for k, v in summary.labels.items() if k not in NOT_MEMORY},
        "rels": summary.relationships,
        "globals": rows(
            "MATCH (g:Global) RETURN g.key, g.attempts, g.successes, g.gain_sum, g.compile_failures"
        ),
        "locals": rows("MATCH (l:Local) RETURN l.key, l.attempts, l.positives, l.negatives, l.gain_sum"),
        "transitions": rows(
            "MATCH (a)-[t:TRANSITION]->(b) RETURN a.key, b.key, t.gpu_arch, t.count, t.successes, t.gain_sum, t.compile_failures, t.rationale"
        ),
        "stats_on": rows(
            "MATCH (a)-[t:STATS_ON]->(b) RETURN a.key, b.key, t.attempts, t.successes, t.gain_sum, t.compile_failures"
        ),
        "evidence_on": rows(
            "MATCH (a)-[t:EVIDENCE_ON]->(b) RETURN a.key, b.key, t.attempts, t.positives, t.negatives, t.gain_sum"
        ),
        "links": rows("MATCH (a:Attempt)-[r]->(b) RETURN a.key, type(r), b.key, r.positive"),
    }
