"""library_offload.channels_last_conv: cuDNN convolutions in channels-last, the result returned as NCHW.

Applies to a forward that is one 2D/3D convolution (or a chain of them, each reading only the previous one, as
in a depthwise-separable block) followed by nothing or by an elementwise epilogue. ModelNew's `__init__` is
the reference's, plus one re-layout of every conv weight to channels-last (same Parameter objects, same
values): never per call. `forward` copies the input to channels-last (that copy is measured with the rest),
runs the convs in cuDNN with activations kept channels-last between them, and ends with ONE Triton kernel that
reads the channels-last conv output, applies the epilogue (the analysis and op emission of
`fusion.library_epilogue`) and writes the contiguous NCHW result the reference returns. No precision setting
is touched: cuDNN's channels-last algorithms may round differently, and the evaluator's fp32 check decides.
"""

from __future__ import annotations

import dataclasses
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
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpKind, OpNode, Ref, Value
from htam_graph.rules.recipes.channels_last.codegen import (
    layout_constants,
    layout_kernel_source,
    layout_launcher_source,
)
from htam_graph.rules.recipes.rewrites.noops import without_copies

KEY = "library_offload.channels_last_conv"
_FORMATS = {4: "torch.channels_last", 5: "torch.channels_last_3d"}  # by the conv output's rank
_CONV_OPS = ("conv2d", "conv3d", "conv_transpose2d", "conv_transpose3d")
_FLOAT_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")


@dataclass(frozen=True)
class ConvPlan:
    """What the recipe writes: the conv chain, its epilogue and the names the forward uses."""

    graph: OpGraph
    convs: tuple[OpNode, ...]  # the first reads a forward input, each next one the previous output
    region: Region  # the epilogue; no nodes when the convs are the whole forward
    conv_vars: tuple[str, ...]  # forward variable of each conv's output
    input_var: str  # the channels-last copy of the forward input
    weights: tuple[str, ...]  # attribute paths of the conv weights re-laid out once in __init__
    memory_format: str
    per_channel: frozenset[str]  # broadcast leaves that vary along the channel dim only

    def flat_broadcast(self) -> bool:
        """Whether some broadcast leaf needs the generic `broadcast_layout` index arithmetic."""
        return uses_flat_broadcast(self.region, self.per_channel)


class ChannelsLastConv(PlannedRecipe[ConvPlan]):
    """Recipe for `library_offload.channels_last_conv`."""

    key = KEY
    default_config = KernelConfig(block=2048, num_warps=4)

    def render(self, view: TaskView, plan: ConvPlan, config: KernelConfig) -> str:
        last = plan.convs[-1]
        suffix = "nchw_epilogue" if plan.region.nodes else "to_nchw"
        kernel_name, launcher_name = f"{last.op}_{suffix}_kernel", f"{last.op}_{suffix}"
        kernel, helpers = layout_kernel_source(plan.region, last.name, kernel_name, plan.per_channel)
        launcher = layout_launcher_source(
            plan.region, last.name, launcher_name, kernel_name, plan.per_channel
        )
        fused = f"applies {plan.region.describe()}" if plan.region.nodes else "applies no other op"
        chain = " -> ".join(c.op for c in plan.convs)
        parts = SourceParts(
            recipe_key=KEY,
            config=config,
            task_key=view.task_key,
            summary=(
                f"{chain} runs in cuDNN in {plan.memory_format} (weights re-laid out once in __init__).",
                f"One Triton kernel reads its channels-last output, {fused},",
                "and writes the contiguous NCHW result: the layout change costs no extra pass.",
            ),
            constants=tuple(layout_constants(kernel_name, config)),
            helpers=tuple(helper_sources(set(helpers))),
            kernels=(kernel,),
            extra=(BROADCAST_LAYOUT_SOURCE,) if plan.flat_broadcast() else (),
            launchers=(launcher,),
            class_doc=f"{chain} in channels-last (cuDNN), then one Triton kernel back to NCHW.",
            forward_body=_forward_body(plan, launcher_name),
        )
        skeleton = dataclasses.replace(
            view.skeleton, init_source=view.skeleton.init_source + _init_tail(plan)
        )
        return render_file(parts, skeleton)

    def plan(self, view: TaskView) -> ConvPlan:
        graph = without_copies(view.graph)
        convs = _conv_chain(graph)
        first = convs[0]
        source = first.operands[0]
        info = graph.tensor(source.name) if isinstance(source, Ref) else None
        if info is None or info.kind != "input":
            raise NotApplicable(f"{first.op} does not read a forward input")
        rank = len(first.shape)
        weights = tuple(_weight_path(graph, conv) for conv in convs)
        paths = [*weights, *(c.module_path for c in convs if c.module_path is not None)]
        if not all(part.isidentifier() for path in paths for part in path.split(".")):
            raise NotApplicable("a conv lives in an indexed container (nn.Sequential): no attribute path")
        input_var = f"{info.name}_cl"
        conv_vars = tuple("y" if i == len(convs) - 1 else f"y{i + 1}" for i in range(len(convs)))
        if {input_var, *conv_vars} & {i.name for i in graph.inputs}:
            raise NotApplicable("the forward's argument names clash with the generated variables")
        region = _epilogue(graph, convs[-1], conv_vars[-1], len(convs))
        per_channel = frozenset(
            leaf.ref for leaf in region.leaves if leaf.broadcast and graph.is_per_channel(leaf.ref, rank)
        )
        plan = ConvPlan(graph, convs, region, conv_vars, input_var, weights, _FORMATS[rank], per_channel)
        # unsupported epilogue ops and conv arguments raise here, so `check` and `emit` agree
        layout_kernel_source(region, convs[-1].name, "probe_kernel", per_channel)
        _forward_body(plan, "probe")
        return plan


def _conv_chain(graph: OpGraph) -> tuple[OpNode, ...]:
    """The leading convs: the first, then each conv that is the only user of the previous one's output."""
    if not graph.nodes or graph.nodes[0].kind is not OpKind.LIBRARY:
        raise NotApplicable("the forward does not start with a convolution")
    first = graph.nodes[0]
    if first.op not in _CONV_OPS:
        raise NotApplicable(f"{first.op} has no channels-last cuDNN path (only 2D/3D convolutions do)")
    if len(first.shape) not in _FORMATS:
        raise NotApplicable(f"{first.op} output has rank {len(first.shape)}, not 4 or 5")
    chain = [first]
    for node in graph.nodes[1:]:
        prev = chain[-1]
        if not (node.kind is OpKind.LIBRARY and node.op in _CONV_OPS and node.operands[0] == Ref(prev.name)):
            break
        if len(node.shape) != len(first.shape) or len(graph.users(prev.name)) != 1:
            raise NotApplicable(f"{prev.name} is used besides feeding {node.op}")
        chain.append(node)
    for conv in chain[:-1]:
        if graph.output.name == conv.name:
            raise NotApplicable("the forward returns an intermediate conv output")
    return tuple(chain)


def _weight_path(graph: OpGraph, conv: OpNode) -> str:
    weight = conv.operands[1] if len(conv.operands) > 1 else None
    info = graph.tensor(weight.name) if isinstance(weight, Ref) else None
    if info is None or info.kind not in ("param", "buffer"):
        raise NotApplicable(f"{conv.op}'s weight is not a parameter (converting it per call is not free)")
    return info.name


def _epilogue(graph: OpGraph, last: OpNode, conv_var: str, n_convs: int) -> Region:
    tail = graph.nodes[n_convs:]
    if not tail:
        if graph.output.name != last.name:
            raise NotApplicable("the forward does not return the conv output")
        if last.dtype not in _FLOAT_DTYPES:
            raise NotApplicable(f"the conv output dtype {last.dtype} is not a float")
        return Region((Leaf(last.name, "y", conv_var, False),), (), (), last.name)
    region = epilogue_region(graph, tail, last, conv_var, f"the epilogue after {last.op} cannot be fused")
    if not region.reads_whole(last.name):
        raise NotApplicable(f"the epilogue does not read {last.op}'s output at the output's shape")
    return region


# ------------------------------------------------------------------------------------------- forward text
def _init_tail(plan: ConvPlan) -> str:
    weights = ", ".join(f"self.{path}" for path in plan.weights) + ("," if len(plan.weights) == 1 else "")
    return (
        "\n        # cuDNN's channels-last kernels read the weights in that layout: re-laid out once "
        "here, never per"
        "\n        # call (same Parameter objects and values; load_state_dict and .to() keep the layout)."
        f"\n        for weight in ({weights}):"
        f"\n            weight.data = weight.data.contiguous(memory_format={plan.memory_format})"
    )


def _forward_body(plan: ConvPlan, launcher_name: str) -> tuple[str, ...]:
    source = plan.convs[0].operands[0]
    assert isinstance(source, Ref)
    lines = [
        f"{plan.input_var} = {source.name}.contiguous(memory_format={plan.memory_format})  # per-call "
        "input copy",
    ]
    previous = plan.input_var
    for conv, var in zip(plan.convs, plan.conv_vars, strict=True):
        lines.append(f"{var} = {_conv_call(plan.graph, conv, previous)}  # cuDNN, channels-last in and out")
        previous = var
    lines.append(f"return {launcher_name}({', '.join(plan.region.call_args())})")
    return tuple(lines)


def _conv_call(graph: OpGraph, node: OpNode, input_var: str) -> str:
    """The conv as the reference called it, on `input_var`."""
    if node.module_path is not None:
        return f"self.{node.module_path}({input_var})"
    args = [input_var] + [_arg(graph, v) for v in node.operands[1:]]
    kwargs = [f"{k}={_arg(graph, v)}" for k, v in node.params]
    return f"torch.nn.functional.{node.op}({', '.join(args + kwargs)})"


def _arg(graph: OpGraph, value: Value) -> str:
    if isinstance(value, Ref):
        info = graph.tensor(value.name)
        if info is None or info.kind == "input":
            raise NotApplicable(f"{value.name} is not a parameter")
        return f"self.{info.name}"
    if isinstance(value, AttrScalar):
        return f"self.{value.path}"
    if isinstance(value, Const):
        return repr(value.value)
    raise NotApplicable(f"unsupported conv argument {value!r}")
