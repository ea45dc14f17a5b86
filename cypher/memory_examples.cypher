// query: memory_examples
// params: local_key, op_tags, positive, limit
// returns: attempt_key, task_key, global_key, local_key, positive, status, error_kind, gain, speedup_x, gpu_arch, kernel_key, language, source
// Past attempts that applied a local strategy with the given polarity, on tasks sharing an op tag ($op_tags
// null: any task), with the kernel each produced. Positives best first (gain desc), negatives worst first
// (gain asc); attempt key as tie-break. CPU attempts (interpreted Triton: not evidence) are never examples.
MATCH (a:Attempt)-[ap:APPLIED]->(:Local {key: $local_key})
WHERE ap.positive = $positive AND coalesce(a.gpu_arch, '') <> 'cpu'
MATCH (a)-[:OF]->(t:Task)
WHERE $op_tags IS NULL OR any(x IN coalesce(t.op_tags, []) WHERE x IN $op_tags)
MATCH (a)-[:PRODUCED]->(k:Kernel)
RETURN a.key AS attempt_key, t.key AS task_key, a.global_key AS global_key, a.local_key AS local_key,
       ap.positive AS positive, a.status AS status, a.error_kind AS error_kind, a.gain AS gain,
       a.speedup_x AS speedup_x, a.gpu_arch AS gpu_arch, k.key AS kernel_key, k.language AS language,
       k.source AS source
ORDER BY CASE WHEN $positive THEN -a.gain ELSE a.gain END ASC, attempt_key ASC
LIMIT $limit
