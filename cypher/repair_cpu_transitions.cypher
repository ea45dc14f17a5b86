// query: repair_cpu_transitions
// params: none
// returns: repaired
// Deletes the TRANSITION edges CPU attempts created (gpu_arch 'cpu'): transitions hold no totals elsewhere, so
// deleting the edge moves their whole contribution out of the policy.
MATCH (:Global)-[t:TRANSITION]->(:Global)
WHERE t.gpu_arch = 'cpu'
DELETE t
RETURN count(*) AS repaired
