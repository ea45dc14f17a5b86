// query: view_globals
// params: none
// returns: key, name, attempts, successes, gain_sum, compile_failures
// Every global direction with its evidence totals (summed over GPU architectures), for `memory view`.
// Means are derived by the reader (gain_sum / attempts).
MATCH (g:Global)
RETURN g.key AS key, g.name AS name, coalesce(g.attempts, 0) AS attempts,
       coalesce(g.successes, 0) AS successes, coalesce(g.gain_sum, 0.0) AS gain_sum,
       coalesce(g.compile_failures, 0) AS compile_failures
ORDER BY key ASC
