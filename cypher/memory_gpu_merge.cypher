// query: memory_gpu_merge
// params: keys
// returns: none
// The (:Gpu {key}) nodes that per-architecture evidence hangs off (e.g. 'sm_90'). keys: distinct strings.
UNWIND $keys AS k
MERGE (:Gpu {key: k})
