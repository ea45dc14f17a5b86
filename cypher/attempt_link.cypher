// query: attempt_link
// params: rows
// returns: linked
// Step 2 of recording (new attempts only): the outcome graph around each Attempt. MERGEs the Task and Run by key
// when absent (other writers own their properties), the Kernel by sha256, and the relationships OF, IN_RUN,
// CHOSE, APPLIED {positive}, PRODUCED and FOLLOWS (when the previous attempt is already stored). Optional links
// use FOREACH over a 0/1 list so a missing end never drops the row.
// rows: [{key, task_key, run_key, created_ms, global_key, local_key, positive, prev_attempt_key,
//         kernel_key, kernel_language, kernel_source}]
UNWIND $rows AS r
MATCH (a:Attempt {key: r.key})
MERGE (t:Task {key: r.task_key})
MERGE (run:Run {key: r.run_key})
ON CREATE SET run.task_key = r.task_key, run.started_ms = r.created_ms
MERGE (a)-[:OF]->(t)
MERGE (a)-[:IN_RUN]->(run)
WITH a, r
MATCH (g:Global {key: r.global_key})
MERGE (a)-[:CHOSE]->(g)
WITH a, r
OPTIONAL MATCH (l:Local {key: r.local_key})
FOREACH (_ IN CASE WHEN l IS NULL THEN [] ELSE [1] END | MERGE (a)-[:APPLIED {positive: r.positive}]->(l))
WITH a, r
OPTIONAL MATCH (p:Attempt {key: r.prev_attempt_key})
FOREACH (_ IN CASE WHEN p IS NULL THEN [] ELSE [1] END | MERGE (a)-[:FOLLOWS]->(p))
WITH a, r
FOREACH (_ IN CASE WHEN r.kernel_key IS NULL THEN [] ELSE [1] END |
  MERGE (k:Kernel {key: r.kernel_key})
  ON CREATE SET k.language = r.kernel_language, k.source = r.kernel_source
  MERGE (a)-[:PRODUCED]->(k))
WITH a
SET a.write_token = null
RETURN count(a) AS linked
