// query: memory_local_evidence
// params: rows
// returns: updated
// Adds evidence to each applied local strategy: totals on the node and per-architecture EVIDENCE_ON edges.
// Pre-aggregated in Python: one row per local, one `archs` entry per (local, gpu_arch); Gpu nodes exist.
UNWIND $rows AS r
MATCH (l:Local {key: r.key})
SET l.attempts = coalesce(l.attempts, 0) + r.attempts,
    l.positives = coalesce(l.positives, 0) + r.positives,
    l.negatives = coalesce(l.negatives, 0) + r.negatives,
    l.gain_sum = coalesce(l.gain_sum, 0.0) + r.gain_sum
WITH l, r
UNWIND r.archs AS s
MATCH (gpu:Gpu {key: s.gpu_arch})
MERGE (l)-[e:EVIDENCE_ON]->(gpu)
SET e.attempts = coalesce(e.attempts, 0) + s.attempts,
    e.positives = coalesce(e.positives, 0) + s.positives,
    e.negatives = coalesce(e.negatives, 0) + s.negatives,
    e.gain_sum = coalesce(e.gain_sum, 0.0) + s.gain_sum
RETURN count(e) AS updated
