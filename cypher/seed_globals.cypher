// query: seed_globals
// params: rows
// returns: merged
// Seeds the global directions: MERGE on key, descriptive properties (name, intent, goals, triggers, risks) from
// the seed file; stat totals start at zero on creation and are never touched here (evidence survives re-seeding).
// rows: [{key, props: {name, intent, goals, triggers, risks}}], one row per key.
UNWIND $rows AS r
MERGE (g:Global {key: r.key})
ON CREATE SET g.attempts = 0, g.successes = 0, g.gain_sum = 0.0, g.compile_failures = 0
WITH g, r
SET g += r.props
RETURN count(g) AS merged
