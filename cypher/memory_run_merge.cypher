// query: memory_run_merge
// params: key, props
// returns: none
// Records a run's description (backend, policy, model, start time, GPU, precision policy, seed) on its Run node.
MERGE (r:Run {key: $key})
SET r += $props
