// query: bank_import_globals
// params: rows
// returns: merged
// Bank import: MERGE global directions on key. Descriptive properties only on creation (the local seed's text
// wins for existing keys); totals start at zero and grow only from imported attempts.
// rows: [{key, props}] with props free of stat fields.
UNWIND $rows AS r
MERGE (g:Global {key: r.key})
ON CREATE SET g += r.props, g.attempts = 0, g.successes = 0, g.gain_sum = 0.0, g.compile_failures = 0
RETURN count(g) AS merged
