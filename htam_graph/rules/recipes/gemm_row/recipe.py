"""fusion.reduction_with_epilogue: a linear / matmul (kept as the cuBLAS call) followed by row-wise work that
includes reductions (sum / mean / max / min / logsumexp over the features, softmax, instance / layer / batch
norm, feature pooling) and elementwise ops before and after them, fused into ONE Triton kernel.

One program owns one row of the library output and keeps it in registers (fp32), so the GEMM output is read
once and only the final row (or one value per row) is written. Batch norm adds a small column-statistics
kernel before it (training mode uses batch statistics, as the reference module does when it is not in eval).
See `gemm_row_plan` for exactly what is accepted.
"""

from __future__ import annotations

import re

from htam_graph.rules.base import KernelConfig, NotApplicable, PlannedRecipe, TaskView
from htam_graph.rules.codegen.model_file import SourceParts, render_file
from htam_graph.rules.codegen.triton_math import helper_sources
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpNode, Ref
from htam_graph.rules.recipes.gemm_row.kernel import WINDOW_SOURCE, row_source
from htam_graph.rules.recipes.gemm_row.plan import RowPlan, plan_rows

KEY = "fusion.reduction_with_epilogue"
_REDUCING = ("reduce", "softmax", "row_norm", "batch_norm", "pool")


class GemmRowEpilogue(PlannedRecipe[RowPlan]):
    """Recipe for `fusion.reduction_with_epilogue` (library GEMM + row reductions in one kernel)."""

    key = KEY
    default_config = KernelConfig(block=1024, num_warps=4)

    def plan(self, view: TaskView) -> RowPlan:
        plan = plan_rows(view.graph)
        if not any(s.action in _REDUCING for s in plan.steps):
            raise NotApplicable(
                "no reduction, softmax, norm or pooling after the library op (see library_epilogue)"
            )
        return plan

    def probe(self, view: TaskView, plan: RowPlan) -> None:
        row_source(plan, self.default_config, "probe")  # fail here on ops with no Triton rule

    def render(self, view: TaskView, plan: RowPlan, config: KernelConfig) -> str:
        stem = _stem(plan)
        pieces = row_source(plan, config, stem)
        y = plan.library_var
        body = [f"{y} = {library_expr(view.graph, plan.library)}  # library op, unchanged (cuBLAS)"]
        if plan.dropout is not None:
            path = plan.dropout.module_path
            body += [
                f"if self.{path}.training and self.{path}.p > 0:  # active dropout: torch's own call, "
                "same RNG stream",
                f"    {y} = torch.nn.functional.dropout({y}, self.{path}.p, training=True)",
            ]
        body += _dim_guards(view.graph, plan)
        body.append(f"return fused_{stem}({', '.join([y, *pieces.call_args])})")
        parts = SourceParts(
            recipe_key=KEY,
            config=config,
            task_key=view.task_key,
            summary=(
                f"{plan.library.op} stays a library call; everything after it is one Triton kernel per row:",
                f"{plan.describe()} (row in registers, fp32 accumulation, "
                "masked lanes hold the neutral element).",
            ),
            constants=tuple(pieces.constants),
            helpers=tuple(helper_sources(set(pieces.helpers))),
            kernels=tuple(pieces.kernels),
            extra=(WINDOW_SOURCE,) if plan.pools else (),
            launchers=(pieces.launcher,),
            class_doc=f"{plan.library.op} (library) followed by one fused row kernel ({plan.describe()}).",
            forward_body=tuple(body),
        )
        return render_file(parts, view.skeleton)


def _stem(plan: RowPlan) -> str:
    ops: list[str] = []
    for step in plan.steps:
        if step.action in _REDUCING:
            op = step.node.op.removeprefix("nn_")
            if op not in ops:
                ops.append(op)
    return re.sub(r"\W", "_", "gemm_" + "_".join(ops[:3]))


def _dim_guards(graph: OpGraph, plan: RowPlan) -> list[str]:
    """Dims read from module attributes: the kernel was planned for their current value (modulo the rank)."""
    lines = []
    for step in plan.steps:
        if step.action not in ("reduce", "identity", "softmax"):
            continue
        dim = step.node.param("dim")
        if isinstance(dim, AttrScalar):
            rank = len(graph.shape_of(step.source))
            planned = int(dim.value) % rank
            lines += [
                f"if self.{dim.path} % {rank} != {planned}:",
                f'    raise ValueError("the kernel was generated for {dim.path} == {planned} (mod {rank})")',
            ]
    return lines


def library_expr(graph: OpGraph, node: OpNode) -> str:
    """The library call as the reference wrote it (a `.T` of a parameter stays `.T`)."""
    if node.module_path is not None:
        return f"self.{node.module_path}({_arg(graph, node.operands[0])})"
    namespace = "torch" if node.op in ("matmul", "mm") else "torch.nn.functional"
    args = [_arg(graph, v) for v in node.operands if v != Const(None)]
    return f"{namespace}.{node.op}({', '.join(args)})"


def _arg(graph: OpGraph, value: object) -> str:
    if isinstance(value, Ref):
        info = graph.tensor(value.name)
        if info is not None:
            return info.name if info.kind == "input" else f"self.{info.name}"
        view = graph.node(value.name)
        if view is not None and view.op == "t":
            return f"{_arg(graph, view.operands[0])}.T"
    raise NotApplicable(f"unsupported library argument {value!r}")
