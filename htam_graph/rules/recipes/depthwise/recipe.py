"""data_reuse.depthwise_conv_direct: a depthwise Conv1d / Conv2d as one direct Triton kernel.

Applies to a forward that starts with a depthwise convolution of a forward input (groups == in_channels, one
input channel per output channel, out_channels = multiplier * groups; any stride / padding / dilation, zero
padding only, optional bias), optionally followed by an elementwise epilogue (fused into the same kernel, the
analysis of `fusion.library_epilogue`) and then by library calls that each read the previous value (the 1x1
pointwise conv of a depthwise-separable block): only the depthwise conv is replaced. cuDNN's depthwise
kernels are far from the bandwidth limit; this kernel reads the input once (halo rows from L1/L2) and writes
the output once (see `depthwise_codegen`). ModelNew's `__init__` is the reference's; the weights, bias and
conv parameters are read from the module (or the call) at every forward, never cached.
"""

from __future__ import annotations

import dataclasses

from htam_graph.rules.analysis.skeleton import check_zero_padding_mode
from htam_graph.rules.base import KernelConfig, NotApplicable, PlannedRecipe, TaskView
from htam_graph.rules.codegen.conv_epilogue import epilogue_region
from htam_graph.rules.codegen.fused_elementwise import Region
from htam_graph.rules.codegen.model_file import SourceParts, render_file
from htam_graph.rules.codegen.triton_math import helper_sources
from htam_graph.rules.ops import Const, OpGraph, OpKind, OpNode, Ref
from htam_graph.rules.recipes.depthwise.codegen import (
    CONV_GEOMETRY_SOURCE,
    DepthwiseCode,
    depthwise_constants,
    depthwise_kernel_source,
    depthwise_launcher_source,
)
from htam_graph.rules.recipes.elementwise.library_epilogue import _arg, _library_call

KEY = "data_reuse.depthwise_conv_direct"
_FLOAT_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")
_DIRECT_OPS = ("conv1d", "conv2d")
MAX_TAPS = 121  # taps are unrolled (tl.static_range): beyond 11x11 compile time grows for little gain


@dataclasses.dataclass(frozen=True)
class DepthwisePlan:
    """The forward split into: the depthwise conv, its fused epilogue, the library calls after it."""

    conv: OpNode
    code: DepthwiseCode
    conv_args: tuple[
        str, ...
    ]  # forward expressions: input, weight, bias, stride, padding, dilation, groups, mode
    tail: tuple[OpNode, ...]  # library calls after the fused part, each reading the previous value
    out_var: str


class DepthwiseConvDirect(PlannedRecipe[DepthwisePlan]):
    """Recipe for `data_reuse.depthwise_conv_direct`."""

    key = KEY
    default_config = KernelConfig(block=1024, num_warps=4)

    def render(self, view: TaskView, plan: DepthwisePlan, config: KernelConfig) -> str:
        op = plan.conv.op
        kernel_name, launcher_name = f"depthwise_{op}_kernel", f"depthwise_{op}"
        kernel, helpers = depthwise_kernel_source(plan.code, kernel_name)
        region = plan.code.region
        call = [*plan.conv_args, *(leaf.expr for leaf in plan.code.leaves())]
        call += [s.expr for s in plan.code.scalars()]
        body = [f"{plan.out_var} = {launcher_name}({', '.join(call)})"]
        for node in plan.tail:
            body.append(
                f"{plan.out_var} = {_library_call(view.graph, node, {_input_of(node): plan.out_var})}"
                "  # library op, unchanged"
            )
        body.append(f"return {plan.out_var}")
        fused = f" + {region.describe()}" if region is not None else ""
        tail = " -> ".join(n.op for n in plan.tail)
        parts = SourceParts(
            recipe_key=KEY,
            config=config,
            task_key=view.task_key,
            summary=(
                f"The depthwise {op} ({plan.conv.origin}){fused} is one direct Triton kernel:",
                "each program accumulates a [BLOCK_H, BLOCK_W] output tile of one channel in fp32 "
                "over the taps,",
                "reading the input once (halo rows from cache) and writing the output once.",
                *((f"Then {tail} stays a library call.",) if plan.tail else ()),
            ),
            constants=tuple(depthwise_constants(kernel_name, config)),
            helpers=tuple(helper_sources(set(helpers))),
            kernels=(kernel,),
            extra=(CONV_GEOMETRY_SOURCE,),
            launchers=(depthwise_launcher_source(plan.code, launcher_name, kernel_name),),
            class_doc=f"Depthwise {op}{fused} in one direct Triton kernel"
            + (f", then {tail} (library)." if plan.tail else "."),
            forward_body=tuple(body),
        )
        return render_file(parts, view.skeleton)

    def plan(self, view: TaskView) -> DepthwisePlan:
        """Split the forward; raises NotApplicable with the reason."""
        graph = view.graph
        conv = _depthwise_conv(graph)
        check_zero_padding_mode(view.skeleton.init_source)
        rest = graph.nodes[1:]
        n_ew = next((i for i, n in enumerate(rest) if n.kind is not OpKind.ELEMENTWISE), len(rest))
        epilogue, tail = rest[:n_ew], rest[n_ew:]
        names = {i.name for i in graph.inputs}
        out_var = "y" if "y" not in names else "dw_out"
        region = _epilogue(graph, conv, epilogue, out_var, tail)
        fused_end = epilogue[-1].name if epilogue else conv.name
        _check_tail(graph, conv, fused_end, tail)
        code = _code(graph, conv, region)
        depthwise_kernel_source(code, "probe_kernel")  # unsupported epilogue ops raise here, not at emit
        return DepthwisePlan(conv, code, _conv_args(graph, conv), tail, out_var)


# ------------------------------------------------------------------------------------------- analysis
def _depthwise_conv(graph: OpGraph) -> OpNode:
    if not graph.nodes or graph.nodes[0].kind is not OpKind.LIBRARY:
        raise NotApplicable("the forward does not start with a convolution")
    conv = graph.nodes[0]
    if conv.op.startswith("conv_transpose"):
        raise NotApplicable(f"{conv.op} is a transposed convolution, not a direct depthwise convolution")
    if not conv.op.startswith("conv"):
        raise NotApplicable(f"the forward starts with {conv.op}, not a convolution")
    if conv.op not in _DIRECT_OPS:
        raise NotApplicable(f"{conv.op}: only 1D and 2D depthwise convolutions are written")
    source, weight = conv.operands[0], conv.operands[1]
    info = graph.tensor(source.name) if isinstance(source, Ref) else None
    if info is None or info.kind != "input":
        raise NotApplicable(f"{conv.op} does not read a forward input")
    if conv.dtype not in _FLOAT_DTYPES or info.dtype != conv.dtype:
        raise NotApplicable(f"{conv.op} on dtype {info.dtype} -> {conv.dtype} (float tensors only)")
    w_info = graph.tensor(weight.name) if isinstance(weight, Ref) else None
    if w_info is None:
        raise NotApplicable(f"{conv.op}'s weight is computed in the forward")
    c_in, c_out, per_group = info.shape[1], w_info.shape[0], w_info.shape[1]
    if per_group != 1:
        groups = c_in // per_group
        if groups == 1:
            raise NotApplicable(
                f"{conv.op} is an ordinary convolution (groups=1, {c_in} input channels), not depthwise"
            )
        raise NotApplicable(
            f"{conv.op} is a grouped convolution with {per_group} input channels per group, not depthwise"
        )
    groups_param = dict(conv.params).get("groups")
    if groups_param is not None and getattr(groups_param, "value", None) != c_in:
        raise NotApplicable(f"{conv.op}: groups={groups_param} is not the {c_in} input channels")
    if c_out % c_in:
        raise NotApplicable(f"{conv.op}: {c_out} output channels are not a multiple of {c_in} groups")
    taps = 1
    for k in w_info.shape[2:]:
        taps *= k
    if taps > MAX_TAPS:
        raise NotApplicable(f"{conv.op}: {taps} taps per output (more than {MAX_TAPS} are not unrolled)")
    return conv


def _epilogue(
    graph: OpGraph, conv: OpNode, nodes: tuple[OpNode, ...], conv_var: str, tail: tuple[OpNode, ...]
) -> Region | None:
    if not nodes:
        return None
    # the region ends where the library tail begins (or at the output): build it on that sub-forward
    sub = dataclasses.replace(graph, output=Ref(nodes[-1].name), nodes=graph.nodes[: 1 + len(nodes)])
    region = epilogue_region(sub, nodes, conv, conv_var, f"the epilogue after {conv.op} cannot be fused")
    if not region.reads_whole(conv.name) or nodes[-1].shape != conv.shape:
        raise NotApplicable(f"the epilogue does not keep {conv.op}'s output shape")
    inner = {conv.name, *(n.name for n in nodes[:-1])}
    for node in tail:  # the tail may read only the region's result, not the conv output or intermediates
        for value in node.operands:
            if isinstance(value, Ref) and value.name in inner:
                raise NotApplicable(f"{node.op} reads an intermediate of the fused epilogue")
    return region


def _check_tail(graph: OpGraph, conv: OpNode, fused_end: str, tail: tuple[OpNode, ...]) -> None:
    """After the fused part only library calls, each reading only the previous value and parameters."""
    users = {n.name for n in graph.users(conv.name)}
    if fused_end == conv.name and len(users) > 1:
        raise NotApplicable(f"the {conv.op} output is used by several ops")
    if not tail:
        if graph.output.name != fused_end:
            raise NotApplicable("the forward does not return the depthwise conv (or its epilogue)")
        return
    previous = fused_end
    for node in tail:
        if node.kind is not OpKind.LIBRARY:
            raise NotApplicable(
                f"{node.op} ({node.origin}) after the depthwise conv is neither fused nor a library call"
            )
        if node.module_path is not None and not all(p.isidentifier() for p in node.module_path.split(".")):
            raise NotApplicable(f"{node.op} lives in an indexed container (nn.Sequential): no attribute path")
        if node.operands[0] != Ref(previous) or len(graph.users(previous)) != 1:
            raise NotApplicable(f"{node.op} does not read only the previous value of the chain")
        for value in node.operands[1:]:
            if isinstance(value, Ref) and graph.tensor(value.name) is None:
                raise NotApplicable(f"{node.op} reads a computed tensor {value.name}")
        previous = node.name
    if graph.output.name != previous:
        raise NotApplicable("the forward does not return the last library call")


def _code(graph: OpGraph, conv: OpNode, region: Region | None) -> DepthwiseCode:
    rank = len(conv.shape)
    per_channel, one = set(), set()
    if region is not None:
        for leaf in region.leaves:
            if leaf.ref == conv.name or not leaf.broadcast:
                continue
            shape = graph.shape_of(leaf.ref)
            padded = (1,) * (rank - len(shape)) + shape
            big = [d for d, size in enumerate(padded) if size != 1]
            if not big:
                one.add(leaf.ref)
            elif big == [1] and len(shape) >= rank - 1:
                per_channel.add(leaf.ref)
            else:
                raise NotApplicable(
                    f"epilogue operand {leaf.ref}{list(shape)} is neither per-channel nor one element"
                )
    return DepthwiseCode(rank - 2, conv.name, region, frozenset(per_channel), frozenset(one))


def _conv_args(graph: OpGraph, conv: OpNode) -> tuple[str, ...]:
    """How the forward passes the conv: input, weight, bias, then stride, padding, dilation, groups, mode."""
    source = _arg(graph, conv.operands[0])
    if conv.module_path is not None:
        path = f"self.{conv.module_path}"
        if not all(part.isidentifier() for part in conv.module_path.split(".")):
            raise NotApplicable("the conv lives in an indexed container (nn.Sequential): no attribute path")
        attrs = ("weight", "bias", "stride", "padding", "dilation", "groups", "padding_mode")
        return (source, *(f"{path}.{a}" for a in attrs))
    operands = [_arg(graph, v) for v in conv.operands[1:]]
    params = dict(conv.params)
    geometry = [
        _arg(graph, params.get(k, Const(d))) for k, d in (("stride", 1), ("padding", 0), ("dilation", 1))
    ]
    return (source, *operands, *geometry, _arg(graph, params.get("groups", Const(1))), repr("zeros"))


def _input_of(node: OpNode) -> str:
    first = node.operands[0]
    assert isinstance(first, Ref)
    return first.name
