// query: memory_global_stats
// params: rows
// returns: updated
// Adds attempt outcomes to each chosen global: totals on the node and per-architecture STATS_ON edges to its Gpu.
// rows: one per attempt [{key, global_key, gpu_arch, successes, gain_sum, compile_failures}]. Only attempts
// still pending this step (`pend_global`) count, and their marker is cleared in this same statement, so a
// re-run after a crash never counts twice. Aggregation happens here, after that filter: one row per
// global reaches the node SET, then one per (global, gpu_arch) reaches the STATS_ON MERGE (FalkorDB crashes /
// loses increments when one batch MERGEs the same relationship twice). The node is updated BEFORE the MERGE:
// with the node SET after the edge MERGE, 4 concurrent writers counted 324 global attempts for 120 on FalkorDB
// 4.16 (tests/integration/test_memory_record.py); in this order they count 120 (6 runs), and the edges show no
// duplicates afterwards. Why the other order over-counts under concurrency is not understood. Gpu nodes exist. `sum` of integers is a
// float on FalkorDB, hence toInteger.
// `SET a.pend_global = a.pend_global` first: on Neo4j a SET reading the property takes the node's write lock before
// reading it, so two writers (a repair racing a live writer) never both see the marker (read-committed);
// FalkorDB runs write queries one at a time.
UNWIND $rows AS r
MATCH (a:Attempt {key: r.key})
SET a.pend_global = a.pend_global
WITH a, r
WHERE a.pend_global = true
SET a.pend_global = null
WITH r
WITH r.global_key AS gk, r.gpu_arch AS arch, count(r) AS n, toInteger(sum(r.successes)) AS succ,
     sum(r.gain_sum) AS gain, toInteger(sum(r.compile_failures)) AS cf
WITH gk, collect({arch: arch, n: n, succ: succ, gain: gain, cf: cf}) AS archs, toInteger(sum(n)) AS tn,
     toInteger(sum(succ)) AS tsucc, sum(gain) AS tgain, toInteger(sum(cf)) AS tcf
MATCH (g:Global {key: gk})
SET g.attempts = coalesce(g.attempts, 0) + tn,
    g.successes = coalesce(g.successes, 0) + tsucc,
    g.gain_sum = coalesce(g.gain_sum, 0.0) + tgain,
    g.compile_failures = coalesce(g.compile_failures, 0) + tcf
WITH g, archs
UNWIND archs AS s
MATCH (gpu:Gpu {key: s.arch})
MERGE (g)-[e:STATS_ON]->(gpu)
SET e.attempts = coalesce(e.attempts, 0) + s.n,
    e.successes = coalesce(e.successes, 0) + s.succ,
    e.gain_sum = coalesce(e.gain_sum, 0.0) + s.gain,
    e.compile_failures = coalesce(e.compile_failures, 0) + s.cf
RETURN count(e) AS updated
