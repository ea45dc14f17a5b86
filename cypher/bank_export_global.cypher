// query: bank_export_global
// params: after, limit
// returns: key, labels, properties, rels
// One page of (:Global) nodes for a memory-bank export, keyset-paged by key (key > $after, ascending; keys are
// unique, so the order is total), each with its outgoing relationships as maps (type, properties, the end
// node's labels and key). Every relationship is exported once, from its start node.
MATCH (n:Global)
WHERE n.key > $after
WITH n
ORDER BY n.key ASC
LIMIT $limit
OPTIONAL MATCH (n)-[r]->(m)
WITH n, collect(CASE WHEN r IS NULL THEN null ELSE {type: type(r), properties: properties(r), end_labels: labels(m), end_key: m.key} END) AS rels
RETURN n.key AS key, labels(n) AS labels, properties(n) AS properties, rels
ORDER BY key ASC
