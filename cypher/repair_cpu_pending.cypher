// query: repair_cpu_pending
// params: none
// returns: cleared
// CPU attempts (Triton run by its interpreter: correctness only, timings meaningless) are never evidence
// (memory.is_evidence). An attempt recorded as evidence by a version without that rule, whose statistics steps
// were still pending when its writer died, would keep its markers for ever (repair_pending never applies a
// statistics step to a CPU attempt): clear them; its link step (pend_link) stays and is still applied.
// One property removed per SET clause, WITH between (FalkorDB removes the wrong property when one SET clause
// sets two properties to null).
MATCH (a:Attempt)
WHERE a.gpu_arch = 'cpu' AND (a.pend_global = true OR a.pend_local = true OR a.pend_transition = true)
SET a.pend_global = null
WITH a
SET a.pend_local = null
WITH a
SET a.pend_transition = null
RETURN count(a) AS cleared
