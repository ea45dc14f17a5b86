// query: schema_version_get
// params: none
// returns: version
// The schema version that apply_schema recorded; no row on a graph that was never migrated.
MATCH (s:SchemaVersion {key: 'htam'})
RETURN s.version AS version
