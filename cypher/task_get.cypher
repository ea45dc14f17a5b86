// query: task_get
// params: keys
// returns: key, suite, level, name, source, source_sha256, op_tags, path, imported_ms
// The imported tasks among $keys, with their source, ordered by key (keys are unique, so the order is total).
// A Task node without source_sha256 (created by an attempt, never imported) is not returned.
UNWIND $keys AS k
MATCH (t:Task {key: k})
WHERE t.source_sha256 IS NOT NULL
RETURN t.key AS key, t.suite AS suite, t.level AS level, t.name AS name, t.source AS source,
       t.source_sha256 AS source_sha256, t.op_tags AS op_tags, t.path AS path, t.imported_ms AS imported_ms
ORDER BY key ASC
