"""fusion.library_epilogue: library op (conv*, conv_transpose*, linear, matmul/bmm) + elementwise tail.

The library call stays (cuDNN / cuBLAS are hard to beat for the main op); everything after it is ONE Triton
kernel that reads the library output once, applies the whole elementwise tail (bias adds, scalings,
activations, clamps, with per-channel or per-feature parameters) and writes the result once.
ModelNew's `__init__` is the reference's, so the submodules and parameters are the same objects by name.
"""

from __future__ import annotations

from htam_graph.rules.base import Applicability, KernelConfig, NotApplicable, TaskView
from htam_graph.rules.codegen import SourceParts, render_file
from htam_graph.rules.fused_elementwise import (
    BROADCAST_LAYOUT_SOURCE,
    Region,
    build_region,
    kernel_source,
    launch_constants,
    launcher_source,
    uses_broadcast,
)
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpKind, OpNode, Ref
from htam_graph.rules.triton_math import helper_sources

KEY = "fusion.library_epilogue"
_TORCH_NAMESPACE = {"matmul": "torch", "mm": "torch", "bmm": "torch"}  # the rest live in torch.nn.functional


class LibraryEpilogue:
    """Recipe for `fusion.library_epilogue`."""

    key = KEY
    default_config = KernelConfig(block=1024, num_warps=4)

    def check(self, view: TaskView) -> Applicability:
        try:
            self._plan(view)
        except NotApplicable as e:
            return Applicability.no(str(e))
        return Applicability.yes()

    def emit(self, view: TaskView, config: KernelConfig) -> str:
        library, region, library_var = self._plan(view)
        kernel_name = f"{library.op}_epilogue_kernel"
        launcher_name = f"{library.op}_epilogue"
        kernel, helpers = kernel_source(region, kernel_name, config)
        call_args = [leaf.expr for leaf in region.leaves] + [s.expr for s in region.scalars]
        parts = SourceParts(
            recipe_key=KEY,
            config=config,
            task_key=view.task_key,
            summary=(
                f"{library.op} stays a library call ({library.origin or library.op});",
                f"its elementwise epilogue is one fused kernel: {region.describe()}.",
            ),
            constants=tuple(launch_constants(kernel_name, config)),
            helpers=tuple(helper_sources(set(helpers))),
            kernels=(kernel,),
            extra=(BROADCAST_LAYOUT_SOURCE,) if uses_broadcast(region) else (),
            launchers=(launcher_source(region, launcher_name, kernel_name, config),),
            class_doc=f"{library.op} (library) followed by one fused Triton epilogue ({region.describe()}).",
            forward_body=(
                f"{library_var} = {_library_call(view.graph, library)}  # library op, unchanged",
                f"return {launcher_name}({', '.join(call_args)})",
            ),
        )
        return render_file(parts, view.skeleton)

    @staticmethod
    def _plan(view: TaskView) -> tuple[OpNode, Region, str]:
        graph = view.graph
        if not graph.nodes or graph.nodes[0].kind is not OpKind.LIBRARY:
            raise NotApplicable("the forward does not start with a library op (conv, linear, matmul)")
        library, tail = graph.nodes[0], graph.nodes[1:]
        if not tail:
            raise NotApplicable(f"{library.op} has no epilogue to fuse")
        for operand in library.operands:
            if isinstance(operand, Ref) and graph.tensor(operand.name) is None:
                raise NotApplicable(f"{library.op} reads a computed tensor {operand.name}")
        leaf_exprs = {info.name: info.name for info in graph.inputs}
        leaf_exprs.update({info.name: f"self.{info.name}" for info in graph.attrs})
        library_var = "y" if "y" not in leaf_exprs else f"{library.name}_out"
        leaf_exprs[library.name] = library_var
        region = build_region(graph, tail, leaf_exprs)
        leaf = next((lf for lf in region.leaves if lf.ref == library.name), None)
        if leaf is None or leaf.broadcast:
            raise NotApplicable(f"the epilogue does not read {library.op}'s output at the output's shape")
        kernel_source(region, "probe_kernel", KernelConfig())
        return library, region, library_var


def _library_call(graph: OpGraph, node: OpNode, computed: dict[str, str] | None = None) -> str:
    """The forward expression of the library op, exactly as the reference called it (`computed`: variables
    of ModelNew.forward holding earlier nodes' outputs, by node name)."""
    if node.module_path is not None:
        return f"self.{node.module_path}({_arg(graph, node.operands[0], computed)})"
    namespace = _TORCH_NAMESPACE.get(node.op, "torch.nn.functional")
    args = [_arg(graph, v, computed) for v in node.operands]
    kwargs = [f"{k}={_arg(graph, v, computed)}" for k, v in node.params]
    return f"{namespace}.{node.op}({', '.join(args + kwargs)})"


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
