"""The base of the reduction / normalisation recipes: plan the forward, filter by reducer, write the file."""

from __future__ import annotations

from htam_graph.rules.base import KernelConfig, PlannedRecipe, TaskView
from htam_graph.rules.codegen.model_file import SourceParts, render_file
from htam_graph.rules.codegen.triton_math import helper_sources
from htam_graph.rules.ops import OpGraph, OpKind, OpNode
from htam_graph.rules.recipes.elementwise.library_epilogue import (
    _library_call,
    call_comment,
    fold_conv_bias,
    fold_linear_bias,
)
from htam_graph.rules.recipes.reduce.kernel import reduction_source
from htam_graph.rules.recipes.reduce.launcher import launcher_call
from htam_graph.rules.recipes.reduce.plan import ReducePlan, plan_reduction

__all__ = ["ReductionRecipe"]


class ReductionRecipe(PlannedRecipe[ReducePlan]):
    """Shared check/emit; subclasses set `key`, `summary` and `accept(plan)` (raise NotApplicable)."""

    key = ""
    summary = ""
    default_config = KernelConfig(block=2048, num_warps=8, max_single_block=16384)
    fold_library_bias = False  # True: a conv / Linear module's bias is added in the kernel (see _fold_bias)

    def accept(self, plan: ReducePlan) -> None:
        raise NotImplementedError

    def plan(self, view: TaskView) -> ReducePlan:
        graph = view.graph
        if self.fold_library_bias and graph.nodes and graph.nodes[0].kind is OpKind.LIBRARY:
            graph = _fold_bias(graph, graph.nodes[0])
        plan = plan_reduction(graph)
        self.accept(plan)
        return plan

    def probe(self, view: TaskView, plan: ReducePlan) -> None:
        reduction_source(plan, self.default_config)  # fail here, not at emit time, on inexpressible ops
        _library_lines(view, plan)

    def render(self, view: TaskView, plan: ReducePlan, config: KernelConfig) -> str:
        pieces, kernel_name, launcher_name = reduction_source(plan, config)
        args, guards = launcher_call(plan)
        body = list(guards)
        body += _library_lines(view, plan)
        library_note = ""
        if plan.library is not None and plan.prefix:
            ops = " -> ".join(n.op for n in (*plan.prefix, plan.library))
            library_note = f"{ops} stay PyTorch / library calls; "
        elif plan.library is not None:
            library_note = f"{plan.library.op} stays a library call; "
        body.append(f"return {launcher_name}({', '.join(args)})")
        parts = SourceParts(
            recipe_key=self.key,
            config=config,
            task_key=view.task_key,
            summary=(
                f"{library_note}fused into one Triton kernel: {plan.describe()} ({plan.mode} mode).",
                self.summary,
            ),
            constants=tuple(pieces.constants),
            helpers=(*helper_sources(set(pieces.helpers)), pieces.combine),
            kernels=(pieces.kernel,),
            extra=pieces.extra,
            launchers=(pieces.launcher,),
            class_doc=f"{library_note}{plan.describe()} as one tiled Triton reduction kernel.",
            forward_body=tuple(body),
        )
        return render_file(parts, view.skeleton)


def _library_lines(view: TaskView, plan: ReducePlan) -> list[str]:
    """ModelNew.forward's library calls: the pooling modules before the library op (if any), then the op."""
    if plan.library is None:
        return []
    lines: list[str] = []
    computed: dict[str, str] = {}
    for node in (*plan.prefix, plan.library):
        call = _library_call(view.graph, node, computed)
        lines.append(f"{plan.library_var} = {call}  # {call_comment(view.graph, node)}")
        computed = {node.name: plan.library_var}
    return lines


def _fold_bias(graph: OpGraph, library: OpNode) -> OpGraph:
    """The graph with the library module's bias moved into the fused kernel: cuDNN adds a conv bias in a
    separate pass over the whole output and cuBLAS's addmm needs its epilogue variant, while the kernel reads
    the library output anyway (library_epilogue.fold_conv_bias / fold_linear_bias). Unchanged otherwise."""
    conv = fold_conv_bias(graph, library)
    if conv is not None:
        return conv[0]
    return fold_linear_bias(graph, library) or graph
