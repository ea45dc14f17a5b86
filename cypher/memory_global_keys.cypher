// query: memory_global_keys
// params: none
// returns: key
// The keys of every global direction (the policy's candidate set), by key.
MATCH (g:Global)
RETURN g.key AS key
ORDER BY key ASC
