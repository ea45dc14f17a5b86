// query: task_list
// params: level
// returns: key, suite, level, name, source_sha256, op_tags, path, imported_ms
// Imported tasks (those with a source_sha256), without their source; all levels when $level is null.
// Ordered by key, which is unique, so the order is total on both engines.
MATCH (t:Task)
WHERE t.source_sha256 IS NOT NULL AND ($level IS NULL OR t.level = $level)
RETURN t.key AS key, t.suite AS suite, t.level AS level, t.name AS name, t.source_sha256 AS source_sha256,
       t.op_tags AS op_tags, t.path AS path, t.imported_ms AS imported_ms
ORDER BY key ASC
