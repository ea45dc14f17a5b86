// query: schema/falkordb/001_key_indexes
// params: none
// returns: none
// Range index on the application key of every keyed label (MERGE on key stays an index lookup).
// One statement per line ending in ';'. Re-running reports "already indexed", which apply_schema tolerates.
// The unique constraints on the same keys are RESP commands (GRAPH.CONSTRAINT), created by apply_schema
// for every label of htam_graph.store.schema.KEYED_LABELS after this file.
CREATE INDEX FOR (n:Global) ON (n.key);
CREATE INDEX FOR (n:Local) ON (n.key);
CREATE INDEX FOR (n:Task) ON (n.key);
CREATE INDEX FOR (n:Run) ON (n.key);
CREATE INDEX FOR (n:Attempt) ON (n.key);
CREATE INDEX FOR (n:Kernel) ON (n.key);
CREATE INDEX FOR (n:Gpu) ON (n.key);
CREATE INDEX FOR (n:SeedInfo) ON (n.key);
CREATE INDEX FOR (n:SchemaVersion) ON (n.key);
