// query: memory_count_labels
// params: none
// returns: label, count
// Number of nodes per (first) label, by label.
MATCH (n)
WITH labels(n)[0] AS label, count(n) AS count
RETURN label, count
ORDER BY label ASC
