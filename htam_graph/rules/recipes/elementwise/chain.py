"""fusion.elementwise_chain: a forward that is only elementwise ops becomes ONE Triton kernel.

The ops may form a DAG over several inputs, parameters (broadcast per channel, per feature or 0-d) and scalar
constants; every intermediate stays in registers, so the fused kernel reads each operand once and writes the
output once, where eager PyTorch launches one kernel per op and round-trips every intermediate through memory.
"""

from __future__ import annotations

from htam_graph.rules.base import KernelConfig, NotApplicable, PlannedRecipe, TaskView
from htam_graph.rules.codegen.fused_elementwise import (
    BROADCAST_LAYOUT_SOURCE,
    Region,
    build_region,
    kernel_source,
    launch_constants,
    launcher_source,
    uses_broadcast,
)
from htam_graph.rules.codegen.model_file import SourceParts, render_file
from htam_graph.rules.codegen.triton_math import helper_sources
from htam_graph.rules.ops import OpKind

KEY = "fusion.elementwise_chain"


class ElementwiseChain(PlannedRecipe[Region]):
    """Recipe for `fusion.elementwise_chain`."""

    key = KEY
    default_config = KernelConfig(block=1024, num_warps=4)

    def render(self, view: TaskView, region: Region, config: KernelConfig) -> str:
        stem = _stem(region)
        kernel_name, launcher_name = f"fused_{stem}_kernel", f"fused_{stem}"
        kernel, helpers = kernel_source(region, kernel_name, config)
        call_args = [leaf.expr for leaf in region.leaves] + [s.expr for s in region.scalars]
        parts = SourceParts(
            recipe_key=KEY,
            config=config,
            task_key=view.task_key,
            summary=(
                f"Fused into one kernel: {region.describe()}",
                "(eager PyTorch runs one kernel per op and writes every intermediate to memory).",
            ),
            constants=tuple(launch_constants(kernel_name, config)),
            helpers=tuple(helper_sources(set(helpers))),
            kernels=(kernel,),
            extra=(BROADCAST_LAYOUT_SOURCE,) if uses_broadcast(region) else (),
            launchers=(launcher_source(region, launcher_name, kernel_name, config),),
            class_doc=f"The reference forward as one fused Triton kernel ({region.describe()}).",
            forward_body=(f"return {launcher_name}({', '.join(call_args)})",),
        )
        return render_file(parts, view.skeleton)

    def plan(self, view: TaskView) -> Region:
        graph = view.graph
        if not graph.nodes:
            raise NotApplicable("the forward computes nothing")
        for node in graph.nodes:
            if node.kind is not OpKind.ELEMENTWISE:
                raise NotApplicable(f"{node.op} ({node.origin}) is not elementwise")
        leaf_exprs = {info.name: info.name for info in graph.inputs}
        leaf_exprs.update({info.name: f"self.{info.name}" for info in graph.attrs})
        region = build_region(graph, graph.nodes, leaf_exprs)
        # Fail here (not at emit time) on ops or arguments the Triton rules cannot express.
        kernel_source(region, "probe_kernel", KernelConfig())
        return region


def _stem(region: Region) -> str:
    ops: list[str] = []
    for node in region.nodes:
        if node.op not in ops:
            ops.append(node.op)
    stem = "_".join(ops[:4]) + ("_etc" if len(ops) > 4 else "")
    return stem.replace("truediv", "div")
