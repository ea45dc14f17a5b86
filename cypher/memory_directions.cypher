// query: memory_directions
// params: none
// returns: key, name, intent, goals, triggers, risks, attempts, successes, gain_sum, compile_failures
// Every global direction with its totals (all architectures), by key.
MATCH (g:Global)
RETURN g.key AS key, g.name AS name, g.intent AS intent, g.goals AS goals, g.triggers AS triggers,
       g.risks AS risks, coalesce(g.attempts, 0) AS attempts, coalesce(g.successes, 0) AS successes,
       coalesce(g.gain_sum, 0.0) AS gain_sum, coalesce(g.compile_failures, 0) AS compile_failures
ORDER BY key ASC
