// query: view_locals
// params: focus
// returns: key, name, global_key, attempts, positives, negatives, gain_sum
// Local strategies for `memory view`: with $focus null, those with recorded evidence (attempts > 0); with a
// focus direction, every local strategy refining it (evidence or not).
MATCH (l:Local)-[:REFINES]->(g:Global)
WHERE ($focus IS NULL AND coalesce(l.attempts, 0) > 0) OR g.key = $focus
RETURN l.key AS key, l.name AS name, g.key AS global_key, coalesce(l.attempts, 0) AS attempts,
       coalesce(l.positives, 0) AS positives, coalesce(l.negatives, 0) AS negatives,
       coalesce(l.gain_sum, 0.0) AS gain_sum
ORDER BY key ASC
