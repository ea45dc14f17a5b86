// query: memory_transitions
// params: rows
// returns: updated
// Adds observed transitions prev_global -> global as evidence on the TRANSITION edge of that GPU architecture
// (one edge per src, dst, gpu_arch; the seed's 'prior' edges are separate and never counted into).
// rows: one per attempt [{key, src, dst, gpu_arch, successes, gain_sum, compile_failures}]. Only attempts still
// pending this step (`pend_transition`) count, and their marker is cleared in this same statement (a re-run
// after a crash never counts twice); aggregation per (src, dst, gpu_arch) happens after that filter, so the
// MERGE names each edge once (FalkorDB crashes / loses increments when one batch MERGEs one edge twice).
// `SET a.pend_transition = a.pend_transition` first: on Neo4j a SET reading the property takes the node's write lock before
// reading it, so two writers (a repair racing a live writer) never both see the marker (read-committed);
// FalkorDB runs write queries one at a time.
UNWIND $rows AS r
MATCH (a:Attempt {key: r.key})
SET a.pend_transition = a.pend_transition
WITH a, r
WHERE a.pend_transition = true
SET a.pend_transition = null
WITH r
WITH r.src AS src, r.dst AS dst, r.gpu_arch AS arch, count(r) AS n, toInteger(sum(r.successes)) AS succ,
     sum(r.gain_sum) AS gain, toInteger(sum(r.compile_failures)) AS cf
MATCH (s:Global {key: src}), (d:Global {key: dst})
MERGE (s)-[t:TRANSITION {gpu_arch: arch}]->(d)
SET t.count = coalesce(t.count, 0) + n,
    t.successes = coalesce(t.successes, 0) + succ,
    t.gain_sum = coalesce(t.gain_sum, 0.0) + gain,
    t.compile_failures = coalesce(t.compile_failures, 0) + cf,
    t.prior = false
RETURN count(t) AS updated
