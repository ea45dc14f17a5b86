// query: attempt_link
// params: rows
// returns: linked
// Step 2 of recording: the outcome graph around each Attempt still pending this step (`pend_link`), which is
// cleared in this same statement, so re-running it after a crash links nothing twice. MERGEs the Task and Run by
// key when absent (other writers own their properties), and the relationships OF, IN_RUN, CHOSE,
// APPLIED {positive}, PRODUCED (to the Kernel attempt_merge created) and FOLLOWS (when the previous attempt is
// already stored). Optional links use FOREACH over a 0/1 list so a missing end never drops the row.
// One property removed per SET clause, WITH between: FalkorDB 4.16 removes the WRONG property when one SET
// clause sets two properties to null (`SET a.x = null, a.y = null` dropped x and an unrelated third one).
// rows: [{key, task_key, run_key, created_ms, global_key, local_key, positive, prev_attempt_key, kernel_key}]
// `SET a.pend_link = a.pend_link` first: on Neo4j a SET reading the property takes the node's write lock before
// reading it, so two writers (a repair racing a live writer) never both see the marker (read-committed);
// FalkorDB runs write queries one at a time.
UNWIND $rows AS r
MATCH (a:Attempt {key: r.key})
SET a.pend_link = a.pend_link
WITH a, r
WHERE a.pend_link = true
SET a.pend_link = null
WITH a, r
SET a.write_token = null
WITH a, r
MERGE (t:Task {key: r.task_key})
MERGE (run:Run {key: r.run_key})
ON CREATE SET run.task_key = r.task_key, run.started_ms = r.created_ms
MERGE (a)-[:OF]->(t)
MERGE (a)-[:IN_RUN]->(run)
WITH a, r
OPTIONAL MATCH (g:Global {key: r.global_key})
FOREACH (_ IN CASE WHEN g IS NULL THEN [] ELSE [1] END | MERGE (a)-[:CHOSE]->(g))
WITH a, r
OPTIONAL MATCH (l:Local {key: r.local_key})
FOREACH (_ IN CASE WHEN l IS NULL THEN [] ELSE [1] END | MERGE (a)-[:APPLIED {positive: r.positive}]->(l))
WITH a, r
OPTIONAL MATCH (p:Attempt {key: r.prev_attempt_key})
FOREACH (_ IN CASE WHEN p IS NULL THEN [] ELSE [1] END | MERGE (a)-[:FOLLOWS]->(p))
WITH a, r
OPTIONAL MATCH (k:Kernel {key: r.kernel_key})
FOREACH (_ IN CASE WHEN k IS NULL THEN [] ELSE [1] END | MERGE (a)-[:PRODUCED]->(k))
RETURN count(DISTINCT a) AS linked
