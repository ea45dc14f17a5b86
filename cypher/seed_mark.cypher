// query: seed_mark
// params: version, digest, seeded_ms
// returns: none
// Records the seed applied: its version and the digest of its content (a single (:SeedInfo {key: 'htam-seed'})
// node), so a seed file edited without a version bump still reaches an existing memory.
MERGE (s:SeedInfo {key: 'htam-seed'})
SET s.version = $version, s.digest = $digest, s.seeded_ms = $seeded_ms
