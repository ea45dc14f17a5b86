// query: seed_state
// params: none
// returns: globals, version, digest
// How many Global nodes exist and which seed (version, content digest) was last applied (nulls when never seeded).
OPTIONAL MATCH (g:Global)
WITH count(g) AS globals
OPTIONAL MATCH (s:SeedInfo {key: 'htam-seed'})
RETURN globals, s.version AS version, s.digest AS digest
