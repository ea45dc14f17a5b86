// query: memory_count_types
// params: none
// returns: type, count
// Number of relationships per type, by type.
MATCH ()-[r]->()
WITH type(r) AS type, count(r) AS count
RETURN type, count
ORDER BY type ASC
