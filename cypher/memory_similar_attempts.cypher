// query: memory_similar_attempts
// params: op_tags, exclude_task_key, limit
// returns: attempt_key, task_key, global_key, local_key, positive, status, error_kind, gain, speedup_x, gpu_arch, kernel_key, language, source
// The `flat` ablation's retrieval: past attempts (any direction) on other tasks sharing an op tag with the
// current one, best first: correct before incorrect, then speed-up over eager, then gain; key as tie-break.
// `positive` is the attempt's evidence polarity (status improved, correct, no error). CPU attempts (interpreted
// Triton) are not evidence and are never retrieved.
MATCH (a:Attempt)-[:OF]->(t:Task)
WHERE t.key <> coalesce($exclude_task_key, '') AND coalesce(a.gpu_arch, '') <> 'cpu'
  AND any(x IN coalesce(t.op_tags, []) WHERE x IN $op_tags)
MATCH (a)-[:PRODUCED]->(k:Kernel)
RETURN a.key AS attempt_key, t.key AS task_key, a.global_key AS global_key, a.local_key AS local_key,
       (a.status = 'improved' AND a.correct = true AND a.error_kind IS NULL AND a.gain > 0.0) AS positive,
       a.status AS status, a.error_kind AS error_kind, a.gain AS gain, a.speedup_x AS speedup_x,
       a.gpu_arch AS gpu_arch, k.key AS kernel_key, k.language AS language, k.source AS source
ORDER BY CASE WHEN a.correct = true THEN 0 ELSE 1 END ASC, coalesce(a.speedup_x, 0.0) DESC, a.gain DESC,
         attempt_key ASC
LIMIT $limit
