"""fusion.composed_kernels: a kernel composed from the forward's operations, for any supported combination.

The forward is cut into stages (partition.py): library ops (conv, conv-transpose, linear, matmul), pooling and
views stay PyTorch calls (cuDNN / cuBLAS), and every run of elementwise ops with at most one reduction or
normalisation between them becomes ONE Triton kernel (group.py, kernels.py), whatever the ops are: an
elementwise prologue before a GEMM, a GEMM's epilogue with a norm and more elementwise ops after it, a conv
followed by a reduction. A conv's or an nn.Linear's bias (the forward's first op) moves into the kernel after
it. Cross-entropy with class-index targets becomes its two reductions (per-row loss, then their mean:
cross_entropy.py). No special recipe is needed for a new combination of supported ops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from htam_graph.rules.base import KernelConfig, NotApplicable, PlannedRecipe, TaskView
from htam_graph.rules.codegen.fused_elementwise import BROADCAST_LAYOUT_SOURCE
from htam_graph.rules.codegen.model_file import SourceParts, render_file
from htam_graph.rules.codegen.triton_math import helper_sources
from htam_graph.rules.compose.cross_entropy import expand_cross_entropy
from htam_graph.rules.compose.group import Group, build_group
from htam_graph.rules.compose.kernels import kernel_source
from htam_graph.rules.compose.launchers import (
    BROADCAST_BLOCKS_SOURCE,
    ROW_HELPERS_SOURCE,
    constants,
    launcher_source,
)
from htam_graph.rules.compose.partition import FusedStage, Stage, TorchStage, drop_identities, partition
from htam_graph.rules.compose.reducers import REDUCING_KINDS
from htam_graph.rules.compose.stats import PROD_COMBINE
from htam_graph.rules.compose.torch_calls import StageCall, torch_call
from htam_graph.rules.ops import OpGraph, OpKind, OpNode
from htam_graph.rules.recipes.elementwise.library_epilogue import fold_conv_bias, fold_linear_bias

__all__ = [
    "ComposedKernels",
    "KEY",
    "ComposedPlan",
    "composed_parts",
    "forward_lines",
    "plan_composed",
    "probe_composed",
]

KEY = "fusion.composed_kernels"


@dataclass(frozen=True)
class ComposedPlan:
    (
        """The stages of the forward, the group of every fused stage (by stage index) and each stage's """
        """variable."""
    )

    graph: OpGraph
    stages: tuple[Stage, ...]
    groups: dict[int, Group]
    variables: tuple[str, ...]

    def describe(self, kept: Callable[[OpNode], str] = lambda node: "PyTorch") -> str:
        """The stages in order; `kept` says what computes each kept stage."""
        parts = []
        for i, stage in enumerate(self.stages):
            if isinstance(stage, TorchStage):
                parts.append(f"{stage.node.op} ({kept(stage.node)})")
            else:
                parts.append(f"[{self.groups[i].describe()}] (Triton)")
        return " -> ".join(parts)


def plan_composed(view: TaskView, needs_fusion: bool = True) -> ComposedPlan:
    """The composed plan of a task, or NotApplicable with the reason. `needs_fusion=False` also plans a
    forward without anything to fuse (a recipe that replaces a library op writes its own kernel there)."""
    graph = view.graph
    if graph.shape_specialised:
        raise NotApplicable(
            "the forward's constants were computed from the analysed sizes (shape introspection)"
        )
    graph = _fold_first_bias(expand_cross_entropy(drop_identities(graph)))
    stages = tuple(partition(graph))
    if needs_fusion and not any(isinstance(s, FusedStage) for s in stages):
        raise NotApplicable("the forward has no elementwise op or reduction to fuse")
    args = {a.split("=")[0] for a in view.skeleton.forward_args}
    exprs = {info.name: info.name for info in graph.inputs}
    exprs.update({info.name: f"self.{info.name}" for info in graph.attrs})
    variables: list[str] = []
    groups: dict[int, Group] = {}
    for i, stage in enumerate(stages):
        if isinstance(stage, FusedStage):
            groups[i] = build_group(graph, stage.nodes, f"composed_{i}", exprs)
        var = _fresh(f"y{i}", args)
        variables.append(var)
        exprs[stage.output] = var
    if stages[-1].output != graph.output.name:
        raise NotApplicable("the forward's output is not its last op")
    return ComposedPlan(graph, stages, groups, tuple(variables))


class ComposedKernels(PlannedRecipe[ComposedPlan]):
    """Recipe for `fusion.composed_kernels`."""

    key = KEY
    default_config = KernelConfig(block=4096, num_warps=4)
    keeps_calls = True

    def plan(self, view: TaskView) -> ComposedPlan:
        return plan_composed(view)

    def probe(self, view: TaskView, plan: ComposedPlan) -> None:
        probe_composed(plan)

    def render(self, view: TaskView, plan: ComposedPlan, config: KernelConfig) -> str:
        return render_file(composed_parts(view, plan, config, KEY), view.skeleton)


def probe_composed(plan: ComposedPlan, call: StageCall = torch_call) -> None:
    """Write every kernel and the forward once: an op the rules cannot express fails here, not at emit."""
    for i, group in plan.groups.items():
        kernel_source(group, f"composed_{i}_kernel")
    forward_lines(plan, call)


def composed_parts(
    view: TaskView, plan: ComposedPlan, config: KernelConfig, key: str, call: StageCall = torch_call
) -> SourceParts:
    """The pieces of the composed file: one kernel and launcher per fused group, and the forward, whose kept
    stages `call` writes (their PyTorch calls by default)."""
    kernels: list[str] = []
    launchers: list[str] = []
    consts: list[str] = []
    helpers: set[str] = set()
    for i, group in plan.groups.items():
        name = f"composed_{i}"
        text, used = kernel_source(group, f"{name}_kernel")
        kernels.append(text)
        helpers |= used
        launchers.append(launcher_source(group, name, f"{name}_kernel"))
        consts += constants(name, config)
    reducing = [g for g in plan.groups.values() if g.reduction is not None]
    extra = [BROADCAST_LAYOUT_SOURCE] if plan.groups else []
    if any(leaf.two_blocks for g in plan.groups.values() for leaf in g.leaves):
        extra.append(BROADCAST_BLOCKS_SOURCE)
    if reducing:
        extra.append(ROW_HELPERS_SOURCE)
    combine = [PROD_COMBINE] if any(g.reduction and g.reduction.family == "prod" for g in reducing) else []
    return SourceParts(
        recipe_key=key,
        config=config,
        task_key=view.task_key,
        summary=(
            f"Composed from the forward's ops: {plan.describe()}.",
            "Library ops stay PyTorch calls; each fused group is one Triton kernel computing in fp32.",
        ),
        constants=tuple(consts),
        helpers=(*helper_sources(helpers), *combine),
        kernels=tuple(kernels),
        extra=tuple(extra),
        launchers=tuple(launchers),
        class_doc=f"Composed: {plan.describe()}.",
        forward_body=tuple(forward_lines(plan, call)),
    )


def forward_lines(plan: ComposedPlan, call: StageCall = torch_call) -> list[str]:
    """ModelNew.forward's body: each kept stage as `call` writes it, each fused group as its launcher."""
    lines: list[str] = []
    computed: dict[str, str] = {}
    for i, stage in enumerate(plan.stages):
        var = plan.variables[i]
        if isinstance(stage, TorchStage):
            lines.append(f"{var} = {call(plan.graph, stage.node, computed)}")
        else:
            group = plan.groups[i]
            lines += _batch_norm_guard(group)
            args = [leaf.expr for leaf in group.leaves] + [s.expr for s in group.scalars]
            lines.append(f"{var} = composed_{i}({', '.join(args)})  # Triton: {group.describe()}")
        computed[stage.output] = var
    lines.append(f"return {plan.variables[-1]}")
    return lines


def _batch_norm_guard(group: Group) -> list[str]:
    """The kernel normalises with batch statistics (what nn.BatchNorm does in training mode, the mode the
    reference runs in) and does not update the running statistics: in eval mode it refuses loudly."""
    red = group.reduction
    if red is None or red.node.op != "nn_batch_norm" or red.node.module_path is None:
        return []
    module = f"self.{red.node.module_path}"
    return [
        f"if not {module}.training and {module}.running_mean is not None:",
        '    raise RuntimeError("this composed batch norm kernel uses batch statistics (training '
        'mode) only")',
    ]


def _fold_first_bias(graph: OpGraph) -> OpGraph:
    """A conv / nn.Linear module's bias moved into the kernel after it (library_epilogue.fold_conv_bias):
    cuDNN adds a conv bias in a separate pass over the output, which the kernel reads anyway. Only when the
    forward starts with that op and its output has one reader, a fused op (with two, the bias would be a
    kernel of its own)."""
    if not graph.nodes or graph.nodes[0].kind is not OpKind.LIBRARY:
        return graph
    first = graph.nodes[0]
    users = graph.users(first.name)
    if len(users) != 1 or users[0].kind is not OpKind.ELEMENTWISE and users[0].kind not in REDUCING_KINDS:
        return graph
    conv = fold_conv_bias(graph, first)
    if conv is not None:
        return conv[0]
    return fold_linear_bias(graph, first) or graph


def _fresh(name: str, taken: set[str]) -> str:
    while name in taken:
        name = f"_{name}"
    return name
