// query: policy_score
// params: history, weights, gpu_arch, foreign_weight, prior_gain, prior_strength, compile_penalty, no_support_score
// returns: candidate, score, support
// The HTG policy's precedent aggregation. For the last K directions ($history, oldest first) with normalised
// recency weights ($weights[i] = exp(-decay*age_i) / sum_j exp(-decay*age_j), computed in Python, summing to 1):
//   score(c) = no_support_score + sum_i w_i * (U(prev_i -> c) - no_support_score)
// over the positions i whose direction has a TRANSITION edge to c, i.e. a position without precedent for c
// counts as no_support_score. U pools the evidence edges of the pair, weighting the current $gpu_arch 1.0,
// other architectures $foreign_weight, and seed 'prior' edges 0 (they only make the pair known):
//   U = (gain_sum + prior_strength * base - compile_penalty * compile_failures) / (count + prior_strength)
// base is what was believed before any evidence: $prior_gain for a pair with a seed prior edge, $no_support_score
// for any other. So evidence moves a pair away from where it stood untried: an unseeded pair (a self-transition)
// tried without gain stays at no_support_score and a slower one drops below it, never above (shrinking every
// pair towards $prior_gain made a null attempt lift an unseeded pair from 0 to 0.0375).
// support: evidence attempts (unweighted) behind the score, summed over positions. Unlisted candidates have no
// support; the caller gives them no_support_score.
UNWIND range(0, size($history) - 1) AS i
WITH i, $history[i] AS prev, $weights[i] AS w
MATCH (p:Global {key: prev})-[t:TRANSITION]->(c:Global)
WITH i, w, c, t,
     CASE WHEN t.gpu_arch = 'prior' THEN 0.0 WHEN t.gpu_arch = $gpu_arch THEN 1.0 ELSE $foreign_weight END AS aw,
     CASE WHEN t.gpu_arch = 'prior' THEN 1 ELSE 0 END AS seeded
WITH i, w, c,
     sum(aw * t.count) AS n,
     sum(aw * t.gain_sum) AS gain,
     sum(aw * t.compile_failures) AS failures,
     toInteger(sum(t.count)) AS evidence,
     max(seeded) AS known
WITH c, w, evidence, n, gain, failures,
     CASE WHEN known = 1 THEN $prior_gain ELSE $no_support_score END AS base
WITH c, w, evidence,
     CASE WHEN n + $prior_strength > 0.0
          THEN (gain + $prior_strength * base - $compile_penalty * failures) / (n + $prior_strength)
          ELSE base END AS utility
WITH c, sum(w * (utility - $no_support_score)) AS lift, toInteger(sum(evidence)) AS support
RETURN c.key AS candidate, $no_support_score + lift AS score, support
ORDER BY score DESC, candidate ASC
