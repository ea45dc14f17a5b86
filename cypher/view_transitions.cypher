// query: view_transitions
// params: focus, min_count
// returns: src, dst, gpu_arch, count, successes, gain_sum, compile_failures, prior
// TRANSITION edges for `memory view`: the seed's priors (gpu_arch 'prior', always kept so they can be drawn
// apart) and evidence edges (one per GPU architecture) observed at least $min_count times; with $focus set,
// only edges into or out of that direction.
MATCH (a:Global)-[t:TRANSITION]->(b:Global)
WHERE ($focus IS NULL OR a.key = $focus OR b.key = $focus)
  AND (t.gpu_arch = 'prior' OR coalesce(t.count, 0) >= $min_count)
RETURN a.key AS src, b.key AS dst, t.gpu_arch AS gpu_arch, coalesce(t.count, 0) AS count,
       coalesce(t.successes, 0) AS successes, coalesce(t.gain_sum, 0.0) AS gain_sum,
       coalesce(t.compile_failures, 0) AS compile_failures, t.gpu_arch = 'prior' AS prior
ORDER BY src ASC, dst ASC, gpu_arch ASC
