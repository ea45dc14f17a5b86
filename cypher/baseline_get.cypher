// query: baseline_get
// params: task_keys
// returns: key, task_key, gpu_arch, gpu_name, shape, precision_policy, eager_us, eager_spread_us, compile_us, torch_version, timing_on_cpu, timing_runs, measured_ms
// Stored reference timings of the given tasks, every GPU architecture, ordered by key (unique: a total order).
UNWIND $task_keys AS k
MATCH (b:Baseline)-[:OF]->(t:Task {key: k})
RETURN b.key AS key, t.key AS task_key, b.gpu_arch AS gpu_arch, b.gpu_name AS gpu_name, b.shape AS shape,
       b.precision_policy AS precision_policy, b.eager_us AS eager_us, b.eager_spread_us AS eager_spread_us,
       b.compile_us AS compile_us, b.torch_version AS torch_version, b.timing_on_cpu AS timing_on_cpu,
       b.timing_runs AS timing_runs, b.measured_ms AS measured_ms
ORDER BY key ASC
