// query: memory_global_stats
// params: rows
// returns: updated
// Adds attempt outcomes to each chosen global: totals on the node and per-architecture STATS_ON edges to its Gpu.
// Pre-aggregated in Python: one row per global, one `archs` entry per (global, gpu_arch); Gpu nodes exist.
// Increments are `coalesce(x, 0) + d` in one SET (no ON CREATE SET before it: FalkorDB's consecutive-SET trap).
UNWIND $rows AS r
MATCH (g:Global {key: r.key})
SET g.attempts = coalesce(g.attempts, 0) + r.attempts,
    g.successes = coalesce(g.successes, 0) + r.successes,
    g.gain_sum = coalesce(g.gain_sum, 0.0) + r.gain_sum,
    g.compile_failures = coalesce(g.compile_failures, 0) + r.compile_failures
WITH g, r
UNWIND r.archs AS s
MATCH (gpu:Gpu {key: s.gpu_arch})
MERGE (g)-[e:STATS_ON]->(gpu)
SET e.attempts = coalesce(e.attempts, 0) + s.attempts,
    e.successes = coalesce(e.successes, 0) + s.successes,
    e.gain_sum = coalesce(e.gain_sum, 0.0) + s.gain_sum,
    e.compile_failures = coalesce(e.compile_failures, 0) + s.compile_failures
RETURN count(e) AS updated
