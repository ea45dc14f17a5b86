// query: memory_local_evidence
// params: rows
// returns: updated
// Adds evidence to each applied local strategy: totals on the node and per-architecture EVIDENCE_ON edges.
// rows: one per attempt [{key, local_key, gpu_arch, positives, negatives, gain_sum}]. Only attempts still
// pending this step (`pend_local`) count, and their marker is cleared in this same statement (a re-run after a
// crash never counts twice); aggregation per (local, gpu_arch) and then per local happens after that filter,
// so the EVIDENCE_ON MERGE sees each edge once. Gpu nodes exist.
// `SET a.pend_local = a.pend_local` first: on Neo4j a SET reading the property takes the node's write lock before
// reading it, so two writers (a repair racing a live writer) never both see the marker (read-committed);
// FalkorDB runs write queries one at a time.
UNWIND $rows AS r
MATCH (a:Attempt {key: r.key})
SET a.pend_local = a.pend_local
WITH a, r
WHERE a.pend_local = true
SET a.pend_local = null
WITH r
WITH r.local_key AS lk, r.gpu_arch AS arch, count(r) AS n, toInteger(sum(r.positives)) AS pos,
     toInteger(sum(r.negatives)) AS neg, sum(r.gain_sum) AS gain
WITH lk, collect({arch: arch, n: n, pos: pos, neg: neg, gain: gain}) AS archs, toInteger(sum(n)) AS tn,
     toInteger(sum(pos)) AS tpos, toInteger(sum(neg)) AS tneg, sum(gain) AS tgain
MATCH (l:Local {key: lk})
SET l.attempts = coalesce(l.attempts, 0) + tn,
    l.positives = coalesce(l.positives, 0) + tpos,
    l.negatives = coalesce(l.negatives, 0) + tneg,
    l.gain_sum = coalesce(l.gain_sum, 0.0) + tgain
WITH l, archs
UNWIND archs AS s
MATCH (gpu:Gpu {key: s.arch})
MERGE (l)-[e:EVIDENCE_ON]->(gpu)
SET e.attempts = coalesce(e.attempts, 0) + s.n,
    e.positives = coalesce(e.positives, 0) + s.pos,
    e.negatives = coalesce(e.negatives, 0) + s.neg,
    e.gain_sum = coalesce(e.gain_sum, 0.0) + s.gain
RETURN count(e) AS updated
