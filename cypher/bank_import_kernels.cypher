// query: bank_import_kernels
// params: rows
// returns: merged
// Bank import: MERGE (:Kernel) nodes on key; properties are written only when the node is created (what the local
// graph already holds wins).
// rows: [{key, props}]
UNWIND $rows AS r
MERGE (n:Kernel {key: r.key})
ON CREATE SET n += r.props
RETURN count(n) AS merged
