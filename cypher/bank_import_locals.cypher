// query: bank_import_locals
// params: rows
// returns: merged
// Bank import: MERGE local strategies on key (descriptive properties on creation only, zero evidence) and their
// REFINES edge to the global named by global_key (MERGE between bound nodes, idempotent).
// rows: [{key, global_key, props}] with props free of stat fields.
UNWIND $rows AS r
MERGE (l:Local {key: r.key})
ON CREATE SET l += r.props, l.attempts = 0, l.positives = 0, l.negatives = 0, l.gain_sum = 0.0
WITH l, r
MATCH (g:Global {key: r.global_key})
MERGE (l)-[:REFINES]->(g)
RETURN count(l) AS merged
