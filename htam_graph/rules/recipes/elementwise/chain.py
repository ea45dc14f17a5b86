"""fusion.elementwise_chain: a forward that is only elementwise ops becomes ONE Triton kernel.

The ops may form a DAG over several inputs, parameters (broadcast per channel, per feature or 0-d) and scalar
constants; every intermediate stays in registers, so the fused kernel reads each operand once and writes the
output once, where eager PyTorch launches one kernel per op and round-trips every intermediate through memory.
"""

from __future__ import annotations

from htam_graph.rules.base import KernelConfig, NotApplicable, PlannedRecipe, TaskView
from htam_graph.rules.codegen.fused_elementwise import Region, build_region, forward_leaf_exprs, kernel_source
from htam_graph.rules.ops import OpKind
from htam_graph.rules.recipes.elementwise.fused_file import fused_region_file

KEY = "fusion.elementwise_chain"


class ElementwiseChain(PlannedRecipe[Region]):
    """Recipe for `fusion.elementwise_chain`."""

    key = KEY
    default_config = KernelConfig(block=1024, num_warps=4)

    def render(self, view: TaskView, region: Region, config: KernelConfig) -> str:
        stem = _stem(region)
        kernel_name, launcher_name = f"fused_{stem}_kernel", f"fused_{stem}"
        return fused_region_file(
            view,
            region,
            (kernel_name, launcher_name),
            config,
            recipe_key=KEY,
            summary=(
                f"Fused into one kernel: {region.describe()}",
                "(eager PyTorch runs one kernel per op and writes every intermediate to memory).",
            ),
            class_doc=f"The reference forward as one fused Triton kernel ({region.describe()}).",
            forward_body=(f"return {launcher_name}({', '.join(region.call_args())})",),
        )

    def plan(self, view: TaskView) -> Region:
        graph = view.graph
        if not graph.nodes:
            raise NotApplicable("the forward computes nothing")
        for node in graph.nodes:
            if node.kind is not OpKind.ELEMENTWISE:
                raise NotApplicable(f"{node.op} ({node.origin}) is not elementwise")
        leaf_exprs = forward_leaf_exprs(graph)
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
