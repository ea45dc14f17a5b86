// query: repair_cpu_local_evidence
// params: none
// returns: repaired
// Moves what CPU attempts added to a local strategy's evidence back out (see repair_cpu_global_stats): each
// EVIDENCE_ON edge to the Gpu 'cpu' is subtracted from its node's totals and deleted in this one statement.
MATCH (l:Local)-[e:EVIDENCE_ON]->(:Gpu {key: 'cpu'})
SET l.attempts = coalesce(l.attempts, 0) - coalesce(e.attempts, 0),
    l.positives = coalesce(l.positives, 0) - coalesce(e.positives, 0),
    l.negatives = coalesce(l.negatives, 0) - coalesce(e.negatives, 0),
    l.gain_sum = coalesce(l.gain_sum, 0.0) - coalesce(e.gain_sum, 0.0)
DELETE e
RETURN count(l) AS repaired
