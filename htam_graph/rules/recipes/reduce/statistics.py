"""The per-statistic tables of the tiled reduction kernel: each statistic's state components (name, initial
value, dtype), the lane update that folds one element `v` into them, and the combine function that merges two
states (used across the BLOCK_R lanes, and across the split programs' partial states)."""

from __future__ import annotations

__all__ = ["COMBINES", "STATES", "STAT_OF", "UPDATES"]

# Per statistic: state components (name, init value, dtype), the lane update and the combine function.
STATES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "sum": (("acc", "0.0", "tl.float32"),),
    "prod": (("acc", "1.0", "tl.float32"),),
    "max": (("acc", '-float("inf")', "tl.float32"),),
    "min": (("acc", 'float("inf")', "tl.float32"),),
    "argmax": (("best", "0.0", "tl.float32"), ("idx", "-1", "tl.int32")),
    "argmin": (("best", "0.0", "tl.float32"), ("idx", "-1", "tl.int32")),
    "welford": (("mean", "0.0", "tl.float32"), ("m2", "0.0", "tl.float32"), ("cnt", "0.0", "tl.float32")),
    "lse": (("m", '-float("inf")', "tl.float32"), ("s", "0.0", "tl.float32")),
}
UPDATES: dict[str, str] = {
    "sum": "acc += tl.where(mask, v, 0.0)",
    "prod": "acc *= tl.where(mask, v, 1.0)",
    "max": 'acc = tl.maximum(acc, tl.where(mask, v, -float("inf")))',
    "min": 'acc = tl.minimum(acc, tl.where(mask, v, float("inf")))',
    "argmax": (
        "better = mask & ((v > best) | (idx < 0))  # strict: the first index wins within a lane\n"
        "best = tl.where(better, v, best)\n"
        "idx = tl.where(better, r_idx, idx)"
    ),
    "argmin": (
        "better = mask & ((v < best) | (idx < 0))  # strict: the first index wins within a lane\n"
        "best = tl.where(better, v, best)\n"
        "idx = tl.where(better, r_idx, idx)"
    ),
    "welford": (
        "cnt += tl.where(mask, 1.0, 0.0)\n"
        "delta = v - mean\n"
        "mean += tl.where(mask, delta / tl.maximum(cnt, 1.0), 0.0)\n"
        "m2 += tl.where(mask, delta * (v - mean), 0.0)"
    ),
    "lse": (
        'v_m = tl.where(mask, v, -float("inf"))\n'
        "m_new = tl.maximum(m, v_m)\n"
        "# a lane that has seen only -inf subtracts 0 instead of -inf (no inf - inf = NaN); its s stays 0\n"
        'm_ref = tl.where(m_new == -float("inf"), 0.0, m_new)\n'
        "s = s * tl.exp(m - m_ref) + tl.exp(v_m - m_ref)\n"
        "m = m_new"
    ),
}
COMBINES: dict[str, str] = {
    "sum": "def _combine_sum(a, b):\n    return a + b\n",
    "prod": "def _combine_prod(a, b):\n    return a * b\n",
    "max": "def _combine_max(a, b):\n    return tl.maximum(a, b)\n",
    "min": "def _combine_min(a, b):\n    return tl.minimum(a, b)\n",
    "argmax": (
        "def _combine_argmax(va, ia, vb, ib):\n"
        "    # the larger value; on ties the lower index (as PyTorch); idx < 0 marks an empty state\n"
        "    take_b = (ia < 0) | ((ib >= 0) & ((vb > va) | ((vb == va) & (ib < ia))))\n"
        "    return tl.where(take_b, vb, va), tl.where(take_b, ib, ia)\n"
    ),
    "argmin": (
        "def _combine_argmin(va, ia, vb, ib):\n"
        "    # the smaller value; on ties the lower index (as PyTorch); idx < 0 marks an empty state\n"
        "    take_b = (ia < 0) | ((ib >= 0) & ((vb < va) | ((vb == va) & (ib < ia))))\n"
        "    return tl.where(take_b, vb, va), tl.where(take_b, ib, ia)\n"
    ),
    "welford": (
        "def _combine_welford(mean_a, m2_a, n_a, mean_b, m2_b, n_b):\n"
        "    # Chan et al.'s parallel formula; empty states (n == 0) contribute nothing\n"
        "    n = n_a + n_b\n"
        "    w_b = tl.where(n == 0.0, 0.0, n_b / tl.where(n == 0.0, 1.0, n))\n"
        "    delta = mean_b - mean_a\n"
        "    return mean_a + delta * w_b, m2_a + m2_b + delta * delta * n_a * w_b, n\n"
    ),
    "lse": (
        "def _combine_lse(m_a, s_a, m_b, s_b):\n"
        "    # merge two (running max, sum of exp(x - max)) pairs; all -inf pairs stay (-inf, 0)\n"
        "    m = tl.maximum(m_a, m_b)\n"
        '    m_ref = tl.where(m == -float("inf"), 0.0, m)\n'
        "    return m, s_a * tl.exp(m_a - m_ref) + s_b * tl.exp(m_b - m_ref)\n"
    ),
}
STAT_OF = {
    "sum": "sum",
    "mean": "sum",
    "prod": "prod",
    "amax": "max",
    "amin": "min",
    "argmax": "argmax",
    "argmin": "argmin",
    "logsumexp": "lse",
    "softmax": "lse",
    "log_softmax": "lse",
    "nn_layer_norm": "welford",
    "layer_norm": "welford",  # F.layer_norm (no module)
    "nn_group_norm": "welford",
    "nn_instance_norm": "welford",
}
