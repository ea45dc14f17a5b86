// query: seed_state
// params: none
// returns: globals, version
// How many Global nodes exist and which seed version was last applied (null when never seeded).
OPTIONAL MATCH (g:Global)
WITH count(g) AS globals
OPTIONAL MATCH (s:SeedInfo {key: 'htam-seed'})
RETURN globals, s.version AS version
