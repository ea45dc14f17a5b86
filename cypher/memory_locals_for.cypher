// query: memory_locals_for
// params: global_key, language, op_tags
// returns: key, props, best_attempt_key, best_kernel_key, worst_attempt_key, worst_kernel_key
// The local strategies refining one global, filtered by kernel language ($language null: any) and task op tags
// ($op_tags null: any; a local with no op_tags applies to every task), with their evidence totals (in props) and
// the best positive / worst negative attempt that applied them (highest / lowest gain, key as tie-break) and the
// kernels those attempts produced, for examples. CPU attempts (interpreted Triton) are never examples.
MATCH (l:Local)-[:REFINES]->(:Global {key: $global_key})
WHERE ($language IS NULL OR $language IN l.languages)
  AND ($op_tags IS NULL OR size(coalesce(l.op_tags, [])) = 0 OR any(t IN l.op_tags WHERE t IN $op_tags))
OPTIONAL MATCH (pa:Attempt)-[:APPLIED {positive: true}]->(l)
WHERE coalesce(pa.gpu_arch, '') <> 'cpu'
WITH l, pa
ORDER BY pa.gain DESC, pa.key ASC
WITH l, collect(pa.key)[0] AS best_key
OPTIONAL MATCH (na:Attempt)-[:APPLIED {positive: false}]->(l)
WHERE coalesce(na.gpu_arch, '') <> 'cpu'
WITH l, best_key, na
ORDER BY na.gain ASC, na.key ASC
WITH l, best_key, collect(na.key)[0] AS worst_key
OPTIONAL MATCH (:Attempt {key: best_key})-[:PRODUCED]->(bk:Kernel)
OPTIONAL MATCH (:Attempt {key: worst_key})-[:PRODUCED]->(wk:Kernel)
RETURN l.key AS key, properties(l) AS props, best_key AS best_attempt_key, bk.key AS best_kernel_key,
       worst_key AS worst_attempt_key, wk.key AS worst_kernel_key
ORDER BY key ASC
