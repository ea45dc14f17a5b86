// query: task_upsert
// params: rows
// returns: written
// Import of KernelBench-form tasks: MERGE (:Task) on key and overwrite its properties with the imported file's.
// rows: [{key, props: {suite, level, name, source, source_sha256, op_tags, path, imported_ms}}], one row per key
// (the caller de-duplicates). A null property (level of a user task) removes it. Nodes that other writes created
// with only a key (an attempt's task) get their properties here.
UNWIND $rows AS r
MERGE (t:Task {key: r.key})
SET t += r.props
RETURN count(t) AS written
