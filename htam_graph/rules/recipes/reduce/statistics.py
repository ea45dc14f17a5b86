"""The per-statistic tables of the tiled reduction kernel: each statistic's state components (name, initial
value, dtype), the lane update that folds one element `v` into them, the merge of a tile's lanes
(`lane_merge`), and the combine function that merges two states (across the split programs' partial states,
and across the lanes of a statistic without a built-in merge)."""

from __future__ import annotations

__all__ = ["COMBINES", "STATES", "STAT_OF", "UPDATES", "lane_merge"]

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
# The merge of a state's lanes along axis 0 written with Triton's built-in reductions: the same result as
# `tl.reduce` with the combine function, as a few sum / max / min reductions. The interpreter runs a custom
# combine function once per element in Python (a smoke-shape GroupNorm spent 42 of 45 s there) but
# tl.sum / tl.max / tl.min as numpy calls.
_LANE_MERGES: dict[str, str] = {
    "sum": "acc = tl.sum(acc, 0)",
    "max": "acc = tl.max(acc, 0)",
    "min": "acc = tl.min(acc, 0)",
    "welford": (
        "# all lanes at once (Chan et al.): M2 = sum(M2_i) + sum(n_i * (mean_i - mean)^2)\n"
        "cnt_all = tl.sum(cnt, 0, keep_dims=True)\n"
        "mean_all = tl.sum(mean * cnt, 0, keep_dims=True) / tl.maximum(cnt_all, 1.0)\n"
        "m2 = tl.sum(m2 + cnt * (mean - mean_all) * (mean - mean_all), 0)\n"
        "mean = tl.sum(mean_all, 0)  # drops the kept axis\n"
        "cnt = tl.sum(cnt_all, 0)"
    ),
    "lse": (
        "# all lanes at once: m = max(m_i), s = sum(s_i * exp(m_i - m)); all -inf lanes stay (-inf, 0)\n"
        "m_all = tl.max(m, 0, keep_dims=True)\n"
        'm_ref = tl.where(m_all == -float("inf"), 0.0, m_all)\n'
        "s = tl.sum(s * tl.exp(m - m_ref), 0)\n"
        "m = tl.sum(m_all, 0)  # drops the kept axis"
    ),
}


def lane_merge(stat: str, states: str) -> str:
    """Lines merging the lanes of `states` (comma-separated names) along axis 0 into per-column states."""
    if stat in _LANE_MERGES:
        return _LANE_MERGES[stat]
    return f"{states} = tl.reduce(({states}), 0, _combine_{stat})"


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
