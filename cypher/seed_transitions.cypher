// query: seed_transitions
// params: rows
// returns: merged
// Seeds prior transitions as TRANSITION edges with gpu_arch 'prior' (one per src, dst): count 0, the rationale,
// risks and conditions. Counts are set only on creation, so re-seeding or importing never changes evidence.
// rows: [{src, dst, rationale, risks, applicable_when}], one row per (src, dst).
UNWIND $rows AS r
MATCH (a:Global {key: r.src}), (b:Global {key: r.dst})
MERGE (a)-[t:TRANSITION {gpu_arch: 'prior'}]->(b)
ON CREATE SET t.count = 0, t.successes = 0, t.gain_sum = 0.0, t.compile_failures = 0
WITH t, r
SET t.prior = true, t.rationale = r.rationale, t.risks = r.risks, t.applicable_when = r.applicable_when
RETURN count(t) AS merged
