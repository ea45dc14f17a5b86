// query: schema/neo4j/002_baseline_key
// params: none
// returns: none
// Migration 2: baselines measured by `htam-graph baseline` are (:Baseline {key})-[:OF]->(:Task) nodes.
CREATE CONSTRAINT htam_baseline_key IF NOT EXISTS FOR (n:Baseline) REQUIRE n.key IS UNIQUE;
