// query: baseline_upsert
// params: rows
// returns: written
// Reference timings of a task on one GPU architecture (eager and torch.compile, same protocol as candidates).
// rows: [{key, task_key, props: {task_key, gpu_arch, gpu_name, shape, precision_policy, eager_us,
// eager_spread_us, compile_us, torch_version, timing_on_cpu, timing_method, timing_runs, measured_ms}}], one row per key
// (key = task_key|gpu_arch|shape|precision_policy; the caller de-duplicates). The Task node is merged on its key
// (a task evaluated from a file may not be imported); the OF edge is merged between the two bound nodes.
UNWIND $rows AS r
MERGE (t:Task {key: r.task_key})
MERGE (b:Baseline {key: r.key})
SET b += r.props
WITH b, t
MERGE (b)-[:OF]->(t)
RETURN count(b) AS written
