// query: memory_top_transitions
// params: limit
// returns: src, dst, gpu_arch, count, successes, gain_sum, compile_failures
// The strongest observed transitions (evidence edges only, not seed priors): by total gain, then count.
MATCH (a:Global)-[t:TRANSITION]->(b:Global)
WHERE t.count > 0
RETURN a.key AS src, b.key AS dst, t.gpu_arch AS gpu_arch, t.count AS count, t.successes AS successes,
       t.gain_sum AS gain_sum, t.compile_failures AS compile_failures
ORDER BY gain_sum DESC, count DESC, src ASC, dst ASC, gpu_arch ASC
LIMIT $limit
