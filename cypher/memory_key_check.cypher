// query: memory_key_check
// params: globals, locals, gpus
// returns: label, key, found
// Which of the given Global / Local / Gpu keys exist. Checked before any write, so a bad key writes nothing,
// and a Gpu node is MERGEd only when missing (saves a write per recording).
UNWIND $globals AS k
OPTIONAL MATCH (g:Global {key: k})
RETURN 'Global' AS label, k AS key, g IS NOT NULL AS found
UNION ALL
UNWIND $locals AS k
OPTIONAL MATCH (l:Local {key: k})
RETURN 'Local' AS label, k AS key, l IS NOT NULL AS found
UNION ALL
UNWIND $gpus AS k
OPTIONAL MATCH (u:Gpu {key: k})
RETURN 'Gpu' AS label, k AS key, u IS NOT NULL AS found
