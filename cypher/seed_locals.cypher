// query: seed_locals
// params: rows
// returns: merged
// Seeds the local strategies and their REFINES edge to the global they refine (MERGE between bound nodes).
// Evidence totals start at zero on creation and are never touched here.
// rows: [{key, global_key, props: {name, global_key, pattern, checks, applicable_when, op_tags, languages, risks}}]
UNWIND $rows AS r
MERGE (l:Local {key: r.key})
ON CREATE SET l.attempts = 0, l.positives = 0, l.negatives = 0, l.gain_sum = 0.0
WITH l, r
SET l += r.props
WITH l, r
MATCH (g:Global {key: r.global_key})
MERGE (l)-[:REFINES]->(g)
RETURN count(l) AS merged
