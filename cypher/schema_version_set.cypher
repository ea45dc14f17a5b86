// query: schema_version_set
// params: version, updated_ms
// returns: version
// Records the schema version after the migrations ran (one node, keyed 'htam'); time in epoch milliseconds.
MERGE (s:SchemaVersion {key: 'htam'})
SET s.version = $version, s.updated_ms = $updated_ms
RETURN s.version AS version
