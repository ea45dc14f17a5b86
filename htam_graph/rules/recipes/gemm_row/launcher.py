"""The Python launcher of the row kernel (kernel.py): operand checks, the batch norm's column statistics and
running-statistics update, one program per row, and the forward's call arguments."""

from __future__ import annotations

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.codegen import template
from htam_graph.rules.ops import number
from htam_graph.rules.recipes.gemm_row.plan import ROW, RowPlan, RowStep, pool_size

__all__ = ["WINDOW_SOURCE", "eps_arg", "launcher"]


def eps_arg(name: str) -> str:
    """The kernel and launcher argument that carries a row norm's eps."""
    return f"eps_{name}"


# The launcher: the library output's rows, pool windows, the output, batch statistics, one program per row.
_LAUNCHER = '''\
def $name($signature) -> torch.Tensor:
    """Launch $kernel (one program per row); sizes are read from the tensors at run time."""
    if $y.dim() != 2:
        raise ValueError(f"expected a 2-d library output, got {tuple($y.shape)}")
    $y = $y.contiguous()
    n_rows, n0 = $y.shape
    block = max(triton.next_power_of_2(n0), 16)  # masked lanes beyond n0 hold neutral elements
    $pools
    $contiguous
    out = torch.empty($shape, device=$y.device, dtype=$y.dtype)
    $batch_norm
    if out.numel() == 0:
        return out
    num_warps = min(16, max(NUM_WARPS, block // 1024))  # ~32 fp32 values per thread per row vector
    $kernel[(n_rows,)]($args, $consts, num_warps=num_warps)
    return out
'''

# Pooling stage i: a power-of-two window (the kernel reshapes the row into [windows, k]).
_POOL_STAGE = """\
if pool_k$i & (pool_k$i - 1):
    raise ValueError(f"pooling window {pool_k$i} is not a power of two")
n$next = n$i // pool_k$i
block = max(block, $windows)
"""


def launcher(plan: RowPlan, name: str, kernel: str, stats_kernel: str | None) -> tuple[str, list[str]]:
    """(launcher source, the forward's call arguments after the library output)."""
    leaves = [lf.arg for lf in plan.leaves]
    scalars = [arg for _, arg in plan.scalars]
    norms = [s for s in plan.steps if s.action == "row_norm"]
    sig = [f"{plan.library_var}: torch.Tensor", *(f"{a}: torch.Tensor" for a in leaves)]
    sig += [f"{a}: float" for a in scalars] + [f"{eps_arg(s.node.name)}: float" for s in norms]
    sig += [f"pool_k{i}: int" for i in range(len(plan.pools))]
    bn = plan.batch_norm
    if bn is not None:
        sig.append("bn: nn.Module")
    y = plan.library_var
    stats = _batch_norm_stats(plan, stats_kernel) if bn is not None and stats_kernel is not None else ""
    args = [y, *leaves, "out", *(["bn_mean", "bn_rstd"] if stats else [])]
    args += [*(f"n{s}" for s in range(len(plan.pools) + 1)), *scalars, *(eps_arg(s.node.name) for s in norms)]
    text = template.fill(
        _LAUNCHER,
        name=name,
        signature=", ".join(sig),
        kernel=kernel,
        y=y,
        pools=[_pool_stage(i) for i in range(len(plan.pools))],
        contiguous=[f"{a} = {a}.contiguous()" for a in leaves],
        shape=_out_shape(plan),
        batch_norm=stats,
        args=", ".join(args),
        consts=", ".join(["BLOCK=block", *(f"POOL_K{i}=pool_k{i}" for i in range(len(plan.pools)))]),
    )
    call = [lf.expr for lf in plan.leaves] + [f"float(self.{p})" for p, _ in plan.scalars]
    call += [_eps_expr(s) for s in norms]
    call += [_pool_expr(s) for s in plan.pools]
    if bn is not None:
        call.append(f"self.{bn.node.module_path}")
    return text, call


def _pool_stage(i: int) -> str:
    windows = " * ".join(f"pool_k{j}" for j in range(i + 1))
    return template.fill(_POOL_STAGE, i=i, next=i + 1, windows=windows)


def _out_shape(plan: RowPlan) -> str:
    """The output's shape: the final rows (feature dim at its place) or one value per row."""
    out = plan.output
    if out.space == ROW:
        dims = ["1"] * plan.out_rank
        dims[0], dims[plan.out_feature_dim] = "n_rows", f"n{out.stage}"
    else:
        dims = ["n_rows"] + ["1"] * (plan.out_rank - 1)
    return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"


# Batch statistics in training mode (or without running statistics), running statistics in eval mode.
_BATCH_NORM_STATS = """\
# batch statistics in training mode (or without running stats), running statistics in eval mode
if bn.training or bn.running_mean is None:
    if n_rows < 2:
        raise ValueError("batch norm in training mode needs more than one row")
    if bn.momentum is None:
        raise NotImplementedError("batch norm with momentum=None (cumulative average) is not generated")
    update = bn.training and bn.running_mean is not None
    bn_mean = torch.empty(n0, device=$y.device, dtype=torch.float32)
    bn_rstd = torch.empty_like(bn_mean)
    running = (bn.running_mean, bn.running_var) if update else (bn_mean, bn_rstd)
    $stats_kernel[(triton.cdiv(n0, STATS_BLOCK_C),)](
        $y, ${operands}bn_mean, bn_rstd, *running, n_rows, n0, float(bn.eps), float(bn.momentum),
        BLOCK_M=STATS_BLOCK_M, BLOCK_C=STATS_BLOCK_C, UPDATE_RUNNING=update, num_warps=4,
    )
    if update:
        bn.num_batches_tracked.add_(1)
else:
    bn_mean = bn.running_mean.float().contiguous()
    bn_rstd = 1.0 / torch.sqrt(bn.running_var.float() + bn.eps)
"""


def _batch_norm_stats(plan: RowPlan, stats_kernel: str) -> str:
    leaves = ", ".join(lf.arg for lf in plan.leaves)
    scalars = ", ".join(a for _, a in plan.scalars)
    operands = "".join(f"{a}, " for a in (leaves, scalars) if a)
    return template.fill(_BATCH_NORM_STATS, y=plan.library_var, stats_kernel=stats_kernel, operands=operands)


def _eps_expr(step: RowStep) -> str:
    path = step.node.module_path
    if path:
        return f"float(self.{path}.eps)"
    eps = number(step.node.param("eps"))
    if eps is None:
        raise NotApplicable(f"{step.node.op} with a non-numeric eps")
    return repr(float(eps))


def _pool_expr(step: RowStep) -> str:
    path = step.node.module_path
    if path is None:
        return repr(pool_size(step.node))
    return f"_window(self.{path}.kernel_size)"


WINDOW_SOURCE = '''def _window(kernel_size: int | tuple[int, ...]) -> int:
    """A 1-d pooling module's window (nn.AvgPool1d keeps a 1-tuple, nn.MaxPool1d an int)."""
    return int(kernel_size[0]) if isinstance(kernel_size, tuple) else int(kernel_size)
'''
