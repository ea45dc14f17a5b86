// query: policy_global_stats
// params: gpu_arch, foreign_weight, prior_gain, prior_strength, compile_penalty
// returns: candidate, score, support
// The `no-transition` ablation: every global scored by its own per-architecture stats (STATS_ON), ignoring the
// trajectory, with the same shrinkage and compile penalty as policy_score:
//   U = (gain_sum + prior_strength * prior_gain - compile_penalty * compile_failures) / (attempts + prior_strength)
// (current $gpu_arch weighs 1.0, other architectures $foreign_weight). A global without stats scores prior_gain.
MATCH (g:Global)
OPTIONAL MATCH (g)-[s:STATS_ON]->(gpu:Gpu)
WITH g, s, CASE WHEN gpu.key = $gpu_arch THEN 1.0 ELSE $foreign_weight END AS aw
WITH g,
     sum(aw * coalesce(s.attempts, 0)) AS n,
     sum(aw * coalesce(s.gain_sum, 0.0)) AS gain,
     sum(aw * coalesce(s.compile_failures, 0)) AS failures,
     toInteger(sum(coalesce(s.attempts, 0))) AS support
RETURN g.key AS candidate,
       CASE WHEN n + $prior_strength > 0.0
            THEN (gain + $prior_strength * $prior_gain - $compile_penalty * failures) / (n + $prior_strength)
            ELSE $prior_gain END AS score,
       support
ORDER BY score DESC, candidate ASC
