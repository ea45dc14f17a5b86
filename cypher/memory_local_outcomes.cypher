// query: memory_local_outcomes
// params: local_keys
// returns: local_key, gpu_arch, status, attempts, gain_sum
// What the attempts that applied each of the given local strategies came to, per GPU architecture and status
// (improved / correct / failed), read from the Attempt records themselves. CPU attempts (interpreted Triton:
// not evidence) and infrastructure failures are left out, as they are from the statistics.
UNWIND $local_keys AS lk
MATCH (a:Attempt)-[:APPLIED]->(l:Local {key: lk})
WHERE coalesce(a.gpu_arch, '') <> 'cpu' AND coalesce(a.device, '') <> 'cpu'
  AND coalesce(a.error_kind, '') <> 'infra_error'
WITH l.key AS local_key, coalesce(a.gpu_arch, 'unknown') AS gpu_arch, a.status AS status, count(a) AS attempts,
     sum(CASE WHEN a.correct = true AND a.compiled = true AND a.error_kind IS NULL AND a.status <> 'failed'
              THEN coalesce(a.gain, 0.0) ELSE 0.0 END) AS gain_sum
RETURN local_key, gpu_arch, status, attempts, gain_sum
ORDER BY local_key ASC, gpu_arch ASC, status ASC
