// query: schema/falkordb/002_baseline_key
// params: none
// returns: none
// Migration 2: baselines measured by `htam-graph baseline` are (:Baseline {key})-[:OF]->(:Task) nodes.
// Its unique constraint follows from htam_graph.store.schema.KEYED_LABELS, like the others.
CREATE INDEX FOR (n:Baseline) ON (n.key);
