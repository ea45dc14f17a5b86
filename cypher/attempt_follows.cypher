// query: attempt_follows
// params: rows
// returns: linked
// FOLLOWS edges between stored attempts (bank import links them after every attempt exists). Idempotent.
// rows: [{key, prev_attempt_key}], one row per attempt.
UNWIND $rows AS r
MATCH (a:Attempt {key: r.key}), (p:Attempt {key: r.prev_attempt_key})
MERGE (a)-[:FOLLOWS]->(p)
RETURN count(a) AS linked
