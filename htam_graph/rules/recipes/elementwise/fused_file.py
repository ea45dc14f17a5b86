"""The candidate file around one fused elementwise kernel (`fused_elementwise`'s flat 1D kernel).

`fusion.elementwise_chain` and `fusion.library_epilogue` write the same kernel, launcher, constants and
helpers for their region; only the file's summary, the class docstring and the forward body (a library call
before the launch, or none) are their own.
"""

from __future__ import annotations

from htam_graph.rules.base import KernelConfig, TaskView
from htam_graph.rules.codegen.fused_elementwise import (
    BROADCAST_LAYOUT_SOURCE,
    Region,
    kernel_source,
    launch_constants,
    launcher_source,
    uses_broadcast,
)
from htam_graph.rules.codegen.model_file import SourceParts, render_file
from htam_graph.rules.codegen.triton_math import helper_sources

__all__ = ["fused_region_file"]


def fused_region_file(
    view: TaskView,
    region: Region,
    names: tuple[str, str],
    config: KernelConfig,
    *,
    recipe_key: str,
    summary: tuple[str, ...],
    class_doc: str,
    forward_body: tuple[str, ...],
) -> str:
    """The whole file: `region` as one kernel and its launcher, `names` = (kernel, launcher)."""
    kernel_name, launcher_name = names
    kernel, helpers = kernel_source(region, kernel_name, config)
    parts = SourceParts(
        recipe_key=recipe_key,
        config=config,
        task_key=view.task_key,
        summary=summary,
        constants=tuple(launch_constants(kernel_name, config)),
        helpers=tuple(helper_sources(set(helpers))),
        kernels=(kernel,),
        extra=(BROADCAST_LAYOUT_SOURCE,) if uses_broadcast(region) else (),
        launchers=(launcher_source(region, launcher_name, kernel_name, config),),
        class_doc=class_doc,
        forward_body=forward_body,
    )
    return render_file(parts, view.skeleton)
