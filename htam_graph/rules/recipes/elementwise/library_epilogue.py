"""fusion.library_epilogue: library op (conv*, conv_transpose*, linear, matmul/bmm) + elementwise tail.

The library call stays (cuDNN / cuBLAS are hard to beat for the main op); everything after it is ONE Triton
kernel that reads the library output once, applies the whole elementwise tail (bias adds, scalings,
activations, clamps, with per-channel or per-feature parameters) and writes the result once.
ModelNew's `__init__` is the reference's, so the submodules and parameters are the same objects by name.

A convolution module's own bias moves into the epilogue: cuDNN adds a bias in a separate pass over the whole
output (H200, fp32: conv3d of level2/48 2057 µs with bias, 1720 µs without; level2/90 6350 against 5007;
results/h200/conv_forms_2026-11-30), while the epilogue reads every output element anyway. torch.compile does
the same. The addition happens in fp32 in the same order (conv result + bias, then the tail).
"""

from __future__ import annotations

import dataclasses

from htam_graph.rules.base import KernelConfig, NotApplicable, PlannedRecipe, TaskView
from htam_graph.rules.codegen.fused_elementwise import Region, build_region, forward_leaf_exprs, kernel_source
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpKind, OpNode, Ref, TensorInfo
from htam_graph.rules.recipes.elementwise.fused_file import fused_region_file

KEY = "fusion.library_epilogue"
_TORCH_NAMESPACE = {
    "matmul": "torch",
    "mm": "torch",
    "bmm": "torch",
    "addmm": "torch",
}  # the rest live in torch.nn.functional
# The comment that ends the library call's line in ModelNew.forward (elementwise/tf32.py wraps that line)
LIBRARY_CALL_MARKS = ("# library op, unchanged", "# library op without its bias: the epilogue adds it")
_CONVS = ("conv1d", "conv2d", "conv3d")
_CONV_TRANSPOSES = ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")


class LibraryEpilogue(PlannedRecipe[tuple[OpNode, Region, str]]):
    """Recipe for `fusion.library_epilogue`."""

    key = KEY
    default_config = KernelConfig(block=1024, num_warps=4)

    def render(self, view: TaskView, plan: tuple[OpNode, Region, str], config: KernelConfig) -> str:
        library, region, library_var = plan
        kernel_name = f"{library.op}_epilogue_kernel"
        launcher_name = f"{library.op}_epilogue"
        return fused_region_file(
            view,
            region,
            (kernel_name, launcher_name),
            config,
            recipe_key=KEY,
            summary=(
                f"{library.op} stays a library call ({library.origin or library.op});",
                f"its elementwise epilogue is one fused kernel: {region.describe()}.",
            ),
            class_doc=f"{library.op} (library) followed by one fused Triton epilogue ({region.describe()}).",
            forward_body=(
                f"{library_var} = {_library_call(view.graph, library)}  "
                f"# {call_comment(view.graph, library)}",
                f"return {launcher_name}({', '.join(region.call_args())})",
            ),
        )

    def plan(self, view: TaskView) -> tuple[OpNode, Region, str]:
        graph = view.graph
        if not graph.nodes or graph.nodes[0].kind is not OpKind.LIBRARY:
            raise NotApplicable("the forward does not start with a library op (conv, linear, matmul)")
        library, tail = graph.nodes[0], graph.nodes[1:]
        if not tail:
            raise NotApplicable(f"{library.op} has no epilogue to fuse")
        for operand in library.operands:
            if isinstance(operand, Ref) and graph.tensor(operand.name) is None:
                raise NotApplicable(f"{library.op} reads a computed tensor {operand.name}")
        leaf_exprs = forward_leaf_exprs(graph)
        folded = fold_conv_bias(graph, library)
        if folded is not None:
            graph, library, bias_expr = folded
            tail = graph.nodes[1:]
            leaf_exprs[graph.attrs[-1].name] = bias_expr
        library_var = "y" if "y" not in leaf_exprs else f"{library.name}_out"
        leaf_exprs[library.name] = library_var
        region = build_region(graph, tail, leaf_exprs)
        if not region.reads_whole(library.name):
            raise NotApplicable(f"the epilogue does not read {library.op}'s output at the output's shape")
        kernel_source(region, "probe_kernel", KernelConfig())
        return library, region, library_var


def fold_conv_bias(graph: OpGraph, library: OpNode) -> tuple[OpGraph, OpNode, str] | None:
    """The graph with a conv module's bias moved out of the library call into an `add` right after it.

    Returns (graph, the bias-less library node, the forward expression of the bias viewed per channel), or
    None when `library` is not a conv / conv-transpose module with a bias. The add node takes the library
    node's name, so the rest of the graph reads the biased value unchanged; the bias-less call is renamed
    `<name>_nobias` and `_library_call` writes it without the bias."""
    path = library.module_path
    if path is None or library.op not in (*_CONVS, *_CONV_TRANSPOSES) or len(library.operands) < 3:
        return None
    bias = library.operands[2]
    bias_info = graph.tensor(bias.name) if isinstance(bias, Ref) else None
    if bias_info is None or len(bias_info.shape) != 1 or len(library.shape) < 3:
        return None
    spatial = len(library.shape) - 2
    # named by its expression relative to the model, so recipes that pass a parameter as `self.<name>` pass
    # this
    view_name = f"{bias_info.name}.view(-1{', 1' * spatial})"
    view_info = TensorInfo(view_name, bias_info.kind, (bias_info.shape[0],) + (1,) * spatial, bias_info.dtype)
    nobias, add = _bias_after(library, view_name, "added in the epilogue")
    folded = dataclasses.replace(
        graph, attrs=(*graph.attrs, view_info), nodes=(nobias, add, *graph.nodes[1:])
    )
    return folded, nobias, f"self.{view_name}"


def fold_linear_bias(graph: OpGraph, library: OpNode) -> OpGraph | None:
    """The graph with an nn.Linear module's bias moved out of the library call into an `add` right after it,
    as `fold_conv_bias` does for convs (the bias (out_features,) already broadcasts over the last dim), or
    None when `library` is not a Linear module with a bias. A kernel that reads the GEMM output anyway adds
    the bias for free, and the GEMM becomes a plain mm (what torch.compile runs before its fused kernel)."""
    path = library.module_path
    if path is None or library.op != "linear" or len(library.operands) < 3:
        return None
    bias = library.operands[2]
    bias_info = graph.tensor(bias.name) if isinstance(bias, Ref) else None
    if bias_info is None or bias_info.name != f"{path}.bias" or len(bias_info.shape) != 1:
        return None
    nobias, add = _bias_after(library, bias_info.name, "added in the fused kernel")
    return dataclasses.replace(graph, nodes=(nobias, add, *graph.nodes[1:]))


def _bias_after(library: OpNode, bias: str, how: str) -> tuple[OpNode, OpNode]:
    """The library call without its bias operand, and the `add` of tensor `bias` that takes the call's name
    (so every later op reads the biased value, as before)."""
    nobias = dataclasses.replace(
        library,
        name=f"{library.name}_nobias",
        operands=(*library.operands[:2], Const(None), *library.operands[3:]),
    )
    add = OpNode(
        library.name,
        OpKind.ELEMENTWISE,
        "add",
        (Ref(nobias.name), Ref(bias)),
        (),
        library.shape,
        library.dtype,
        None,
        f"{library.origin} bias, {how}",
    )
    return nobias, add


def _library_call(graph: OpGraph, node: OpNode, computed: dict[str, str] | None = None) -> str:
    """The forward expression of the library op, exactly as the reference called it (`computed`: variables
    of ModelNew.forward holding earlier nodes' outputs, by node name); a conv module whose bias
    `fold_conv_bias` moved out is called without it."""
    if node.module_path is not None and _bias_folded(graph, node):
        x = _arg(graph, node.operands[0], computed)
        m = f"self.{node.module_path}"
        if node.op in _CONVS:  # the module's own forward minus the bias (handles every padding_mode)
            return f"{m}._conv_forward({x}, {m}.weight, None)"
        if node.op == "linear":  # fold_linear_bias
            return f"torch.nn.functional.linear({x}, {m}.weight)"
        return (
            f"torch.nn.functional.{node.op}({x}, {m}.weight, None, {m}.stride, {m}.padding, "
            f"{m}.output_padding, {m}.groups, {m}.dilation)"
        )
    if node.module_path is not None:
        return f"self.{node.module_path}({_arg(graph, node.operands[0], computed)})"
    namespace = _TORCH_NAMESPACE.get(node.op, "torch.nn.functional")
    args = [_arg(graph, v, computed) for v in node.operands]
    kwargs = [f"{k}={_arg(graph, v, computed)}" for k, v in node.params]
    return f"{namespace}.{node.op}({', '.join(args + kwargs)})"


def call_comment(graph: OpGraph, node: OpNode) -> str:
    folded = node.module_path is not None and _bias_folded(graph, node)
    return LIBRARY_CALL_MARKS[1 if folded else 0].removeprefix("# ")


def _bias_folded(graph: OpGraph, node: OpNode) -> bool:
    """Whether `node` is a conv / Linear module call whose bias `fold_conv_bias` / `fold_linear_bias` moved
    into the epilogue."""
    return (
        node.op in (*_CONVS, *_CONV_TRANSPOSES, "linear")
        and len(node.operands) >= 3
        and node.operands[2] == Const(None)
        and graph.tensor(f"{node.module_path}.bias") is not None
    )


def _arg(graph: OpGraph, value: object, computed: dict[str, str] | None = None) -> str:
    if isinstance(value, Ref) and computed and value.name in computed:
        return computed[value.name]
    if isinstance(value, Ref):
        info = graph.tensor(value.name)
        if info is None:
            raise NotApplicable(f"{value.name} is not an input or a parameter")
        return info.name if info.kind == "input" else f"self.{info.name}"
    if isinstance(value, AttrScalar):
        return f"self.{value.path}"
    if isinstance(value, Const):
        return repr(value.value)
    raise NotApplicable(f"unsupported library argument {value!r}")
