"""reduction_structure.block_scan: cumsum / cumprod along any dim, inclusive or exclusive, in fp32.

Applies to a forward that is one `torch.cumsum` / `torch.cumprod` of an input, or the exclusive-cumsum pattern
`cat((zeros_like(x.select(d, 0).unsqueeze(d)), cumsum(x.narrow(d, 0, x.size(d) - 1), d)), d)`, which is proved
structurally (every node, dim and the narrow length are checked), so it holds at every size: the result is an
exclusive scan of x along d with x's shape. `flip(scan(flip(x, d), d), d)` is proved a reverse scan.

The input is viewed as [outer, length, inner]. inner == 1 (scan along the last dim): one program per row walks
the row in BLOCK chunks, scans each chunk with tl.cumsum / tl.associative_scan and adds the carried prefix of
the earlier chunks. inner > 1: each program owns BLOCK_I contiguous columns of one outer index (coalesced) and
walks the scan dim in [BLOCK_L, BLOCK_I] tiles. Exclusive: element j reads x[j - 1] (the identity at j = 0),
so each input byte is still read once. Reverse: scan position j is element length - 1 - j. Each chunk is
scanned as a tree, not sequentially like PyTorch's CPU loop: long fp32 cumsums differ in rounding (checked
at rtol=atol=1e-4 on the dev tasks' default sizes by tests/gpu/test_rules_library_loss_scan_gpu.py).
"""

from __future__ import annotations

from htam_graph.rules.base import KernelConfig, PlannedRecipe, TaskView
from htam_graph.rules.codegen.model_file import SourceParts, forward_expr, render_file
from htam_graph.rules.ops import AttrScalar, number
from htam_graph.rules.recipes.scans import codegen
from htam_graph.rules.recipes.scans.plan import ScanPlan, plan_scan

__all__ = ["KEY", "BlockScan", "ScanPlan", "plan_scan"]

KEY = "reduction_structure.block_scan"


class BlockScan(PlannedRecipe[ScanPlan]):
    """Recipe for `reduction_structure.block_scan`."""

    key = KEY
    default_config = KernelConfig(block=2048, num_warps=8)

    def plan(self, view: TaskView) -> ScanPlan:
        return plan_scan(view.graph)

    def render(self, view: TaskView, plan: ScanPlan, config: KernelConfig) -> str:
        tensors = [forward_expr(view.graph, ref) for ref in plan.tensors]
        dim = f"int(self.{plan.dim.path})" if isinstance(plan.dim, AttrScalar) else repr(number(plan.dim))
        form = ("exclusive" if plan.exclusive else "inclusive") + (" reverse" if plan.reverse else "")
        parts = SourceParts(
            recipe_key=self.key,
            config=config,
            task_key=view.task_key,
            summary=(
                f"{form} {plan.op} along dim {dim}: one pass, chunked tree scan + carried prefix in fp32.",
                "Each chunk is scanned as a tree (PyTorch's CPU loop is sequential): rounding differs "
                "slightly.",
            ),
            constants=(
                f"BLOCK = {config.block}  # elements per chunk (BLOCK_L x BLOCK_I tiles when the scan "
                "dim is strided)",
                f"NUM_WARPS = {config.num_warps}",
                "MAX_BLOCK_I = 64  # contiguous columns per program when the scan dim is not the last",
            ),
            helpers=tuple(codegen.kernel_helpers(plan)),
            kernels=(codegen.rows_kernel(plan), codegen.columns_kernel(plan)),
            launchers=(codegen.launcher(plan),),
            class_doc=f"{form} {plan.op} along one dim as a chunked Triton scan.",
            forward_body=(f"return {plan.name}({', '.join(tensors)}, {dim})",),
        )
        return render_file(parts, view.skeleton)
