// query: bank_import_priors
// params: rows
// returns: merged
// Bank import: MERGE the seed's prior TRANSITION edges (gpu_arch 'prior') between existing globals. Rationale,
// risks and conditions only on creation; counts are 0 and never changed.
// rows: [{src, dst, rationale, risks, applicable_when}], one per (src, dst).
UNWIND $rows AS r
MATCH (a:Global {key: r.src}), (b:Global {key: r.dst})
MERGE (a)-[t:TRANSITION {gpu_arch: 'prior'}]->(b)
ON CREATE SET t.count = 0, t.successes = 0, t.gain_sum = 0.0, t.compile_failures = 0, t.prior = true,
              t.rationale = r.rationale, t.risks = r.risks, t.applicable_when = r.applicable_when
RETURN count(t) AS merged
