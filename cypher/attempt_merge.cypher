// query: attempt_merge
// params: rows, token
// returns: key, created
// Step 1 of recording: MERGE the Attempt records on key. A node created by THIS call carries this call's random
// token, so `created` tells the caller exactly which attempts are new; stat increments are then applied for
// those only, so re-recording or re-importing an attempt is a no-op (also between concurrent writers, since
// MERGE on a unique key creates a node once). attempt_link clears the token.
// Crash safety: `props` carries the pending-step markers (pend_link, and pend_global / pend_local /
// pend_transition when the attempt is evidence for that step); each later step clears its marker in the same
// statement that applies it, and memory.repair_pending completes the steps a killed writer left undone. The
// Kernel node (with its source, which the Attempt does not store) is created here, in the same atomic
// statement, so a repair never needs the source; attempt_link adds the PRODUCED edge.
// rows: [{key, props, kernel_key, kernel_language, kernel_source}], keys unique within the batch.
UNWIND $rows AS r
MERGE (a:Attempt {key: r.key})
ON CREATE SET a += r.props, a.write_token = $token
WITH a, r
FOREACH (_ IN CASE WHEN a.write_token = $token AND r.kernel_key IS NOT NULL THEN [1] ELSE [] END |
  MERGE (k:Kernel {key: r.kernel_key})
  ON CREATE SET k.language = r.kernel_language, k.source = r.kernel_source)
WITH a
RETURN a.key AS key, a.write_token = $token AS created
