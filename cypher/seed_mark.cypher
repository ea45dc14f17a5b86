// query: seed_mark
// params: version, seeded_ms
// returns: none
// Records the seed version applied (a single (:SeedInfo {key: 'htam-seed'}) node).
MERGE (s:SeedInfo {key: 'htam-seed'})
SET s.version = $version, s.seeded_ms = $seeded_ms
