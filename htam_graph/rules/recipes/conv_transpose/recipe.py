"""algebraic_rewrite.conv_transpose_as_conv: a transposed convolution computed by cuDNN's FORWARD convolution.

Why: cuDNN's fp32 transposed (dgrad) 3D kernels can be several times slower than its forward kernels at the
same FLOP count. A stride-1 transposed conv IS a forward conv with the weight transposed per group and
flipped, padded by dilation * (k - 1) - padding. A strided one splits into stride**D output phases (sub-pixel
decomposition), each a stride-1 forward conv with the sub-kernel of the taps that reach it (see
`conv_transpose_phases`): exactly the useful FLOPs, no zero-insertion. The weight transform runs in forward
on every call (it is tiny), never cached, so a changed weight changes the output. Then ONE Triton launch per
row phase (r1, r2) (one for 1D) writes whole output rows left to right: each element is read once from the
phase result of its innermost phase, gets the elementwise epilogue of the reference forward (the region
analysis of `fusion.library_epilogue`) and is stored contiguously: every output byte is written once, in full
32-byte sectors (see `conv_transpose_codegen`). With no epilogue and stride 1, that kernel is a plain copy
(one extra pass over the output).

Applies to a forward whose first op is the one nn.ConvTranspose{1,2,3}d module call on a forward input,
followed by nothing or by elementwise ops only. Whether it is faster than eager is a measurement, per task.
"""

from __future__ import annotations

from dataclasses import dataclass

from htam_graph.rules.base import KernelConfig, NotApplicable, PlannedRecipe, TaskView
from htam_graph.rules.codegen.conv_epilogue import epilogue_region
from htam_graph.rules.codegen.fused_elementwise import (
    BROADCAST_LAYOUT_SOURCE,
    Leaf,
    Region,
    uses_flat_broadcast,
)
from htam_graph.rules.codegen.model_file import SourceParts, render_file
from htam_graph.rules.codegen.triton_math import helper_sources
from htam_graph.rules.ops import OpGraph, OpKind, OpNode, Ref
from htam_graph.rules.recipes.conv_transpose.codegen import (
    ROW_PHASES_SOURCE,
    phase_constants,
    phase_kernel_source,
    phase_launcher_source,
)
from htam_graph.rules.recipes.conv_transpose.phases import PHASES_FUNCTION, PHASES_SOURCE
from htam_graph.rules.recipes.conv_transpose.tail import CALL_FUNCTION, rewritten_forward
from htam_graph.rules.recipes.rewrites.noops import without_copies

__all__ = ["ConvTransposeAsConv", "RewritePlan", "KEY"]

KEY = "algebraic_rewrite.conv_transpose_as_conv"
_TRANSPOSED = {"conv_transpose1d": 1, "conv_transpose2d": 2, "conv_transpose3d": 3}
_FLOAT_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")
_FORWARD_NAMES = ("module", "out_sizes", "phases")  # ModelNew.forward's own variables


@dataclass(frozen=True)
class RewritePlan:
    """What the recipe writes: the transposed conv, its epilogue and the per-channel operands."""

    conv: OpNode
    module: str  # attribute path of the nn.ConvTransposeNd
    region: Region  # the fused epilogue; no nodes when there is none
    per_channel: frozenset[str]
    # the reference forward's body with the conv call replaced, when the ops around the conv are kept as they
    # are
    kept_forward: tuple[str, ...] | None = None

    def flat_broadcast(self) -> bool:
        """Whether some broadcast leaf needs `broadcast_layout`'s index arithmetic."""
        return uses_flat_broadcast(self.region, self.per_channel)


class ConvTransposeAsConv(PlannedRecipe[RewritePlan]):
    """Recipe for `algebraic_rewrite.conv_transpose_as_conv`."""

    key = KEY
    default_config = KernelConfig(block=1024, num_warps=4)

    def render(self, view: TaskView, plan: RewritePlan, config: KernelConfig) -> str:
        op = plan.conv.op
        kernel_name, launcher_name = f"{op}_phase_kernel", f"{op}_write_phases"
        kernel, helpers = phase_kernel_source(plan.region, plan.conv.name, kernel_name, plan.per_channel)
        launcher = phase_launcher_source(
            plan.region, plan.conv.name, launcher_name, kernel_name, plan.per_channel
        )
        fused = f"applies {plan.region.describe()}" if plan.region.nodes else "applies no other op"
        kept = plan.kept_forward is not None
        if kept:
            fused = "copies it (the other ops of the forward run as in the reference)"
        parts = SourceParts(
            recipe_key=KEY,
            config=config,
            task_key=view.task_key,
            summary=(
                f"{op} ({plan.conv.origin}) is computed by forward convolutions (cuDNN's forward path,",
                "not its transposed one): one stride-1 conv per output phase (stride**D phases), each with",
                "the weight transposed per group, flipped and cut to the taps that reach that phase.",
                "One Triton launch per row phase (r1, r2) writes whole output rows, "
                "contiguously: each element",
                f"read once from the phase result of its innermost phase, plus the conv bias; it {fused}.",
            ),
            constants=tuple(phase_constants(kernel_name, config)),
            helpers=tuple(helper_sources(set(helpers))),
            kernels=(kernel,),
            extra=(
                PHASES_SOURCE,
                ROW_PHASES_SOURCE,
                *((BROADCAST_LAYOUT_SOURCE,) if plan.flat_broadcast() else ()),
            ),
            launchers=(launcher, *((_call_source(op, launcher_name),) if kept else ())),
            class_doc=(
                f"The reference forward, its {op} computed by per-phase forward convolutions."
                if kept
                else f"{op} as per-phase forward convolutions, then one Triton epilogue per row phase."
            ),
            forward_body=plan.kept_forward
            if plan.kept_forward is not None
            else _forward_body(plan, launcher_name),
        )
        return render_file(parts, view.skeleton)

    def plan(self, view: TaskView) -> RewritePlan:
        conv = _the_conv(view.graph)
        assert conv.module_path is not None
        try:
            return _fused_plan(view, conv)
        except NotApplicable as fused:
            try:
                body = rewritten_forward(
                    view.skeleton.forward_source,
                    conv.module_path,
                    view.skeleton.imports,
                    _generated_names(conv),
                )
            except NotApplicable as kept:
                raise NotApplicable(f"{fused}; and the forward cannot be kept around it: {kept}") from kept
        region = Region((Leaf(conv.name, "conv_out", "conv_out", False),), (), (), conv.name)
        return RewritePlan(conv, conv.module_path, region, frozenset(), body)


def _the_conv(graph: OpGraph) -> OpNode:
    """The forward's one transposed conv, an nn.ConvTransposeNd module on a batched float input."""
    convs = [n for n in graph.nodes if n.kind is OpKind.LIBRARY and n.op in _TRANSPOSED]
    if len(convs) != 1:
        raise NotApplicable(f"the forward has {len(convs)} transposed convolutions, not exactly one")
    conv = convs[0]
    if conv.module_path is None:
        raise NotApplicable(f"{conv.op} is a functional call, not an nn.ConvTranspose module")
    if not all(part.isidentifier() for part in conv.module_path.split(".")):
        raise NotApplicable(f"{conv.module_path} lives in an indexed container: no attribute path")
    if len(conv.shape) != _TRANSPOSED[conv.op] + 2:
        raise NotApplicable(f"{conv.op} runs on an unbatched input (output rank {len(conv.shape)})")
    if conv.dtype not in _FLOAT_DTYPES:
        raise NotApplicable(f"the {conv.op} output dtype {conv.dtype} is not a float")
    return conv


def _fused_plan(view: TaskView, conv: OpNode) -> RewritePlan:
    """The conv first, on a forward input, then nothing or one elementwise epilogue fused into the kernel."""
    path = conv.module_path
    assert path is not None
    graph = without_copies(view.graph)
    if graph.nodes[0].name != conv.name:
        raise NotApplicable(f"{graph.nodes[0].op} runs before {conv.op}")
    others = [n.op for n in graph.nodes[1:] if n.kind is OpKind.LIBRARY]
    if others:
        raise NotApplicable(f"other library ops follow {conv.op}: {', '.join(others)}")
    source = conv.operands[0]
    info = graph.tensor(source.name) if isinstance(source, Ref) else None
    if info is None or info.kind != "input":
        raise NotApplicable(f"{conv.op} does not read a forward input")
    if set(_FORWARD_NAMES) & set(view.skeleton.forward_args):
        raise NotApplicable("the forward's argument names clash with the generated variables")
    conv = graph.node(conv.name) or conv
    region = _epilogue(graph, conv)
    rank = len(conv.shape)
    per_channel = frozenset(
        leaf.ref
        for leaf in region.leaves
        if leaf.broadcast and leaf.ref != conv.name and graph.is_per_channel(leaf.ref, rank)
    )
    # unsupported epilogue ops and names raise here, so `check` and `emit` agree
    phase_kernel_source(region, conv.name, "probe_kernel", per_channel)
    return RewritePlan(conv, path, region, per_channel)


def _generated_names(conv: OpNode) -> frozenset[str]:
    """Module-level names of the generated file (the kept forward may not rebind them)."""
    names = {CALL_FUNCTION, PHASES_FUNCTION, "phase_plan", "broadcast_layout"}
    names |= {"PHASE_SLOTS", "row_phase_tensors", "interleave_phases"}
    names |= {f"{conv.op}_phase_kernel", f"{conv.op}_write_phases"}
    names |= {f"BLOCK_{conv.op.upper()}_PHASE", f"NUM_WARPS_{conv.op.upper()}_PHASE"}
    return frozenset(names)


def _epilogue(graph: OpGraph, conv: OpNode) -> Region:
    tail = graph.nodes[1:]
    if not tail:
        if graph.output.name != conv.name:
            raise NotApplicable(f"the forward does not return the {conv.op} output")
        return Region((Leaf(conv.name, "conv_out", "conv_out", False),), (), (), conv.name)
    failure = f"the ops after {conv.op} are not one elementwise epilogue"
    region = epilogue_region(graph, tail, conv, "y", failure)
    if not region.reads_whole(conv.name):
        raise NotApplicable(f"the epilogue does not read the {conv.op} output at the output's shape")
    return region


def _forward_body(plan: RewritePlan, launcher_name: str) -> tuple[str, ...]:
    source = plan.conv.operands[0]
    assert isinstance(source, Ref)
    others = [leaf for leaf in plan.region.leaves if leaf.ref != plan.conv.name]
    args = ["phases", "out_sizes", "module.stride", "module.bias", *(leaf.expr for leaf in others)]
    args += [s.expr for s in plan.region.scalars]
    return (
        f"module = self.{plan.module}  # the reference's {plan.conv.origin.split()[0]}: weight and "
        "bias read per call",
        "# bias None: the phase kernel adds module.bias once, instead of cuDNN in a pass of its own",
        f"out_sizes, phases = {PHASES_FUNCTION}(",
        f"    {source.name}, module.weight, None, module.stride, module.padding, module.output_padding,",
        "    module.dilation, module.groups,",
        ")",
        f"return {launcher_name}({', '.join(args)})",
    )


def _call_source(op: str, launcher_name: str) -> str:
    """The function the kept forward calls in place of the module."""
    return (
        f"def {CALL_FUNCTION}(module: nn.Module, x: torch.Tensor) -> torch.Tensor:\n"
        f'    """module(x) for the nn.ConvTransposeNd `module`: {op} by per-phase forward convolutions."""\n'
        "    # bias None: the phase kernel adds module.bias once, instead of cuDNN in a pass of its own\n"
        f"    out_sizes, phases = {PHASES_FUNCTION}(\n"
        "        x, module.weight, None, module.stride, module.padding, module.output_padding,\n"
        "        module.dilation, module.groups,\n"
        "    )\n"
        f"    return {launcher_name}(phases, out_sizes, module.stride, module.bias)\n"
    )
