"""The Python launcher of the row kernel (kernel.py): operand checks, the batch norm's column statistics and
running-statistics update, one program per row, and the forward's call arguments."""

from __future__ import annotations

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import number
from htam_graph.rules.recipes.gemm_row.plan import ROW, RowPlan, RowStep, pool_size

__all__ = ["WINDOW_SOURCE", "eps_arg", "launcher"]


def eps_arg(name: str) -> str:
    """The kernel and launcher argument that carries a row norm's eps."""
    return f"eps_{name}"


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
    lines = [
        f"def {name}({', '.join(sig)}) -> torch.Tensor:",
        f'    """Launch {kernel} (one program per row); sizes are read from the tensors at run time."""',
        f"    if {y}.dim() != 2:",
        f'        raise ValueError(f"expected a 2-d library output, got {{tuple({y}.shape)}}")',
        f"    {y} = {y}.contiguous()",
        f"    n_rows, n0 = {y}.shape",
        "    block = max(triton.next_power_of_2(n0), 16)  # masked lanes beyond n0 hold neutral elements",
    ]
    for i in range(len(plan.pools)):
        lines += [
            f"    if pool_k{i} & (pool_k{i} - 1):",
            f'        raise ValueError(f"pooling window {{pool_k{i}}} is not a power of two")',
            f"    n{i + 1} = n{i} // pool_k{i}",
            f"    block = max(block, {' * '.join(f'pool_k{j}' for j in range(i + 1))})",
        ]
    for lf in plan.leaves:
        lines.append(f"    {lf.arg} = {lf.arg}.contiguous()")
    out = plan.output
    if out.space == ROW:
        dims = ["1"] * plan.out_rank
        dims[0], dims[plan.out_feature_dim] = "n_rows", f"n{out.stage}"
    else:
        dims = ["n_rows"] + ["1"] * (plan.out_rank - 1)
    shape = f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"
    lines.append(f"    out = torch.empty({shape}, device={y}.device, dtype={y}.dtype)")
    stats_args = []
    if bn is not None and stats_kernel is not None:
        lines += _batch_norm_lines(plan, stats_kernel)
        stats_args = ["bn_mean", "bn_rstd"]
    args = [y, *leaves, "out", *stats_args, *(f"n{s}" for s in range(len(plan.pools) + 1)), *scalars]
    args += [eps_arg(s.node.name) for s in norms]
    consts = ["BLOCK=block", *(f"POOL_K{i}=pool_k{i}" for i in range(len(plan.pools)))]
    lines += [
        "    if out.numel() == 0:",
        "        return out",
        "    num_warps = min(16, max(NUM_WARPS, block // 1024))  # ~32 fp32 values per thread per row vector",
        f"    {kernel}[(n_rows,)]({', '.join(args)}, {', '.join(consts)}, num_warps=num_warps)",
        "    return out",
    ]
    call = [lf.expr for lf in plan.leaves] + [f"float(self.{p})" for p, _ in plan.scalars]
    call += [_eps_expr(s) for s in norms]
    call += [_pool_expr(s) for s in plan.pools]
    if bn is not None:
        call.append(f"self.{bn.node.module_path}")
    return "\n".join(lines) + "\n", call


def _batch_norm_lines(plan: RowPlan, stats_kernel: str) -> list[str]:
    y = plan.library_var
    leaves = ", ".join(lf.arg for lf in plan.leaves)
    scalars = ", ".join(a for _, a in plan.scalars)
    extra = "".join(f"{a}, " for a in (leaves, scalars) if a)
    return [
        "    # batch statistics in training mode (or without running stats), running statistics in eval mode",
        "    if bn.training or bn.running_mean is None:",
        "        if n_rows < 2:",
        '            raise ValueError("batch norm in training mode needs more than one row")',
        "        if bn.momentum is None:",
        '            raise NotImplementedError("batch norm with momentum=None (cumulative average) is '
        'not generated")',
        "        update = bn.training and bn.running_mean is not None",
        f"        bn_mean = torch.empty(n0, device={y}.device, dtype=torch.float32)",
        "        bn_rstd = torch.empty_like(bn_mean)",
        "        running = (bn.running_mean, bn.running_var) if update else (bn_mean, bn_rstd)",
        f"        {stats_kernel}[(triton.cdiv(n0, STATS_BLOCK_C),)](",
        f"            {y}, {extra}bn_mean, bn_rstd, *running, n_rows, n0, float(bn.eps), float(bn.momentum),",
        "            BLOCK_M=STATS_BLOCK_M, BLOCK_C=STATS_BLOCK_C, UPDATE_RUNNING=update, num_warps=4,",
        "        )",
        "        if update:",
        "            bn.num_batches_tracked.add_(1)",
        "    else:",
        "        bn_mean = bn.running_mean.float().contiguous()",
        "        bn_rstd = 1.0 / torch.sqrt(bn.running_var.float() + bn.eps)",
    ]


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
