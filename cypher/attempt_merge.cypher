// query: attempt_merge
// params: rows, token
// returns: key, created
// Step 1 of recording: MERGE the Attempt records on key. A node created by THIS call carries this call's random
// token, so `created` tells the caller exactly which attempts are new; stat increments are then applied for
// those only, so re-recording or re-importing an attempt is a no-op (also between concurrent writers, since
// MERGE on a unique key creates a node once). attempt_link clears the token.
// rows: [{key, props}], keys unique within the batch.
UNWIND $rows AS r
MERGE (a:Attempt {key: r.key})
ON CREATE SET a += r.props, a.write_token = $token
WITH a
RETURN a.key AS key, a.write_token = $token AS created
