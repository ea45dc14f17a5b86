// query: attempt_pending
// params: after, limit
// returns: key, props
// Attempts with a recording step still pending (a writer was killed between the statements of
// record_attempts), keyset-paged by key. memory.repair_pending rebuilds each attempt from its stored properties
// and re-runs the pending steps, each of which applies only to attempts still marked.
MATCH (a:Attempt)
WHERE a.key > $after
  AND (a.pend_link = true OR a.pend_global = true OR a.pend_local = true OR a.pend_transition = true)
WITH a
ORDER BY a.key ASC
LIMIT $limit
RETURN a.key AS key, properties(a) AS props
ORDER BY key ASC
