// query: memory_transitions
// params: rows
// returns: updated
// Adds observed transitions prev_global -> global as evidence on the TRANSITION edge of that GPU architecture
// (one edge per src, dst, gpu_arch; the seed's 'prior' edges are separate and never counted into).
// Pre-aggregated in Python: one row per (src, dst, gpu_arch) -- FalkorDB loses increments when one UNWIND batch
// MERGEs the same relationship twice.
UNWIND $rows AS r
MATCH (a:Global {key: r.src}), (b:Global {key: r.dst})
MERGE (a)-[t:TRANSITION {gpu_arch: r.gpu_arch}]->(b)
SET t.count = coalesce(t.count, 0) + r.count,
    t.successes = coalesce(t.successes, 0) + r.successes,
    t.gain_sum = coalesce(t.gain_sum, 0.0) + r.gain_sum,
    t.compile_failures = coalesce(t.compile_failures, 0) + r.compile_failures,
    t.prior = false
RETURN count(t) AS updated
