"""Norm statistics for `fusion.conv_reduction_epilogue`: batch norm (per channel over batch and space) and
group norm (per sample and group), computed from the conv output before the fused kernel runs.

The statistics kernel folds a slice of each group's elements into Welford (mean, M2, count) lanes, evaluating
the elementwise ops between the conv and the norm as it loads; the finish kernel merges the slices with Chan's
formula and writes mean, 1/sqrt(var + eps) and the unbiased variance (for the running statistics).
Batch norm follows the module's mode at run time: training (or no running statistics) uses the batch
statistics and updates the running ones as nn.BatchNorm does; eval mode uses the running statistics.
"""

from __future__ import annotations

from htam_graph.rules.codegen import template
from htam_graph.rules.codegen.fused_elementwise import operand_renderer
from htam_graph.rules.codegen.triton_math import emit_op
from htam_graph.rules.ops import Ref
from htam_graph.rules.recipes.conv_reduce.plan import ConvReducePlan
from htam_graph.rules.recipes.reduce.statistics import COMBINES, lane_merge

__all__ = ["WELFORD_COMBINE", "stats_kernel_source", "stats_finish_source", "stats_launcher_source"]

WELFORD_COMBINE = "@triton.jit\n" + COMBINES["welford"]


# Welford (mean, M2, count) lanes over one slice of one group, evaluating the ops before the norm on load.
_STATS_KERNEL = '''\
@triton.jit
def $name(
    $params
):
    """Welford (mean, M2, count) of the norm input over one slice of one group's elements."""
    g = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    lanes = tl.arange(0, BLOCK)
    mean = tl.zeros([BLOCK], tl.float32)
    m2 = tl.zeros([BLOCK], tl.float32)
    cnt = tl.zeros([BLOCK], tl.float32)
    r_start = split * per_split
    r_end = tl.minimum(r_start + per_split, n_red)
    for r0 in range(r_start, r_end, BLOCK):
        r = (r0 + lanes).to(tl.int64)
        mask = r < r_end
        offs = g * group_stride + (r // row_len) * row_stride + r % row_len
        x0 = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        $chain
        v = $value
        cnt += tl.where(mask, 1.0, 0.0)
        delta = v - mean
        mean += tl.where(mask, delta / tl.maximum(cnt, 1.0), 0.0)
        m2 += tl.where(mask, delta * (v - mean), 0.0)
    $merge
    tl.store(pmean_ptr + g * n_split + split, mean)
    tl.store(pm2_ptr + g * n_split + split, m2)
    tl.store(pcnt_ptr + g * n_split + split, cnt)
'''


def stats_kernel_source(plan: ConvReducePlan, name: str) -> tuple[str, set[str]]:
    """Welford partial statistics of the norm input over one slice of each group."""
    assert plan.norm is not None
    scalars = {s.path: s.arg for s in plan.scalars}
    vars_: dict[str, str] = {plan.library.name: "x0"}
    helpers: set[str] = set()
    render = operand_renderer(vars_, scalars, " before the norm")
    chain = []
    for i, node in enumerate(plan.norm_chain):
        emitted = emit_op(node, render)
        helpers |= emitted.helpers
        chain.append(f"c{i} = {emitted.expr}  # {node.op} ({node.origin})")
        vars_[node.name] = f"c{i}"
    source = plan.norm.operands[0]
    assert isinstance(source, Ref)
    params = ["y_ptr", "pmean_ptr", "pm2_ptr", "pcnt_ptr", "n_red", "row_len", "row_stride", "group_stride"]
    params += ["per_split", "n_split", *(s.arg for s in plan.scalars), "BLOCK: tl.constexpr"]
    text = template.fill(
        _STATS_KERNEL,
        name=name,
        params=[f"{p}," for p in params],
        chain=chain,
        value=vars_[source.name],
        merge=lane_merge("welford", "mean, m2, cnt"),
    )
    return text, helpers


# Merge the slices of BLOCK_G groups with Chan's formula: mean, 1/sqrt(biased var + eps), unbiased var.
_STATS_FINISH = '''\
@triton.jit
def $name(pmean_ptr, pm2_ptr, pcnt_ptr, mean_ptr, rstd_ptr, var_ptr, n_groups, n_split, eps, \
BLOCK_G: tl.constexpr):
    """Merge the slices of BLOCK_G groups (Chan's formula): mean, 1/sqrt(biased var + eps), unbiased var."""
    g = tl.program_id(0) * BLOCK_G + tl.arange(0, BLOCK_G)
    gmask = g < n_groups
    base = g.to(tl.int64) * n_split
    mean = tl.load(pmean_ptr + base, mask=gmask, other=0.0)
    m2 = tl.load(pm2_ptr + base, mask=gmask, other=0.0)
    cnt = tl.load(pcnt_ptr + base, mask=gmask, other=0.0)
    for j in range(1, n_split):
        mean_j = tl.load(pmean_ptr + base + j, mask=gmask, other=0.0)
        m2_j = tl.load(pm2_ptr + base + j, mask=gmask, other=0.0)
        cnt_j = tl.load(pcnt_ptr + base + j, mask=gmask, other=0.0)
        mean, m2, cnt = _combine_welford(mean, m2, cnt, mean_j, m2_j, cnt_j)
    var = m2 / tl.maximum(cnt, 1.0)
    tl.store(mean_ptr + g, mean, mask=gmask)
    tl.store(rstd_ptr + g, 1.0 / tl.sqrt(var + eps), mask=gmask)
    tl.store(var_ptr + g, m2 / tl.maximum(cnt - 1.0, 1.0), mask=gmask)
'''


def stats_finish_source(name: str) -> str:
    return template.fill(_STATS_FINISH, name=name)


# `norm_statistics_<stem>`: the module's running statistics in eval mode, else the two kernels' batch
# statistics (and, for batch norm in training, the running statistics' update).
_STATS_LAUNCHER = '''\
def norm_statistics_$stem(y: torch.Tensor, norm: nn.Module$scalar_args) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, 1/sqrt(var + eps)) of the norm input, as flat fp32 vectors."""
    $eval_mode
    y = y.contiguous()
    n_batch, n_chan = y.shape[0], y.shape[1]
    spatial = y[0, 0].numel()
    $groups
    # few groups with many elements: split each group across programs (partials merged after)
    n_split = max(1, min(triton.cdiv(STATS_TARGET_PROGRAMS, n_groups), triton.cdiv(n_red, 4 * STATS_BLOCK)))
    per_split = triton.cdiv(triton.cdiv(n_red, n_split), STATS_BLOCK) * STATS_BLOCK
    n_split = triton.cdiv(n_red, per_split)
    parts = torch.empty(3, n_groups * n_split, device=y.device, dtype=torch.float32)
    stats = torch.empty(3, n_groups, device=y.device, dtype=torch.float32)
    $kernel[(n_groups, n_split)](
        y, parts[0], parts[1], parts[2], n_red, row_len, row_stride, group_stride, \
per_split, n_split$call_scalars,
        BLOCK=STATS_BLOCK, num_warps=4,
    )
    block_g = min(triton.next_power_of_2(n_groups), 128)
    $finish[(triton.cdiv(n_groups, block_g),)](
        parts[0], parts[1], parts[2], stats[0], stats[1], stats[2], n_groups, n_split, float(norm.eps),
        BLOCK_G=block_g, num_warps=4,
    )
    $running_update
    return stats[0], stats[1]
'''

_BATCH_EVAL = """\
if not norm.training and norm.running_mean is not None:  # eval mode: the running statistics
    return norm.running_mean.float().contiguous(), \
torch.rsqrt(norm.running_var.float() + norm.eps).contiguous()
"""

# Batch norm: per channel c, N rows of `spatial` contiguous elements.
_BATCH_GROUPS = """\
# per channel c: N rows of `spatial` contiguous elements, one row every n_chan * spatial
n_groups, n_red, row_len, row_stride, group_stride = n_chan, n_batch * spatial, \
spatial, n_chan * spatial, spatial
"""

# Group norm: per (sample, group), one contiguous row.
_GROUP_GROUPS = """\
if n_chan % norm.num_groups:
    raise ValueError(f"{n_chan} channels do not split into {norm.num_groups} groups")
# per (sample, group): one contiguous row of (n_chan // num_groups) * spatial elements
n_red = n_chan // norm.num_groups * spatial
n_groups, row_len, row_stride, group_stride = n_batch * norm.num_groups, n_red, 0, n_red
"""

_BATCH_RUNNING_UPDATE = """\
if norm.training and norm.running_mean is not None:  # the module's side effect, as nn.BatchNorm
    with torch.no_grad():
        norm.num_batches_tracked.add_(1)
        norm.running_mean.lerp_(stats[0].to(norm.running_mean.dtype), norm.momentum)
        norm.running_var.lerp_(stats[2].to(norm.running_var.dtype), norm.momentum)
"""


def stats_launcher_source(plan: ConvReducePlan, stem: str, kernel: str, finish: str) -> str:
    """`norm_statistics_<stem>(y, norm, scalars) -> (mean, rstd)` per channel (batch) or (sample, group)."""
    assert plan.norm is not None
    batch = plan.norm.op == "nn_batch_norm"
    return template.fill(
        _STATS_LAUNCHER,
        stem=stem,
        scalar_args="".join(f", {s.arg}: float" for s in plan.scalars),
        eval_mode=_BATCH_EVAL if batch else "",
        groups=_BATCH_GROUPS if batch else _GROUP_GROUPS,
        kernel=kernel,
        call_scalars="".join(f", {s.arg}" for s in plan.scalars),
        finish=finish,
        running_update=_BATCH_RUNNING_UPDATE if batch else "",
    )
