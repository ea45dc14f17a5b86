// query: repair_cpu_global_stats
// params: none
// returns: repaired
// Moves what CPU attempts added to a global's statistics back out: a version without the CPU rule counted them
// (on a STATS_ON edge to the Gpu 'cpu', and in the node's totals). Each such edge is subtracted from its node's
// totals and deleted in this one statement, so a re-run finds nothing left to subtract.
MATCH (g:Global)-[s:STATS_ON]->(:Gpu {key: 'cpu'})
SET g.attempts = coalesce(g.attempts, 0) - coalesce(s.attempts, 0),
    g.successes = coalesce(g.successes, 0) - coalesce(s.successes, 0),
    g.gain_sum = coalesce(g.gain_sum, 0.0) - coalesce(s.gain_sum, 0.0),
    g.compile_failures = coalesce(g.compile_failures, 0) - coalesce(s.compile_failures, 0)
DELETE s
RETURN count(g) AS repaired
