"""fusion.conv_reduction_epilogue: a convolution (cuDNN, unchanged) whose epilogue reduces over channels or
space, pools, or normalises (batch / group norm), as few Triton kernels that read the conv output once.

See `conv_reduce_plan` for what the chain may contain and `conv_reduce_codegen` for the kernels. Kernels:
[norm statistics + merge (batch / group norm only)] -> the channel-tile kernel -> [per-sample finish kernel
(a reduction over all spatial dims only)]. ModelNew's `__init__` is the reference's (same parameters by name);
pooling windows, norm eps / groups / momentum and numeric attributes are read from the modules at run time.
"""

from __future__ import annotations

import re

from htam_graph.rules.base import KernelConfig, NotApplicable, PlannedRecipe, TaskView
from htam_graph.rules.codegen.model_file import SourceParts, render_file
from htam_graph.rules.codegen.triton_math import helper_sources
from htam_graph.rules.ops import AttrScalar
from htam_graph.rules.recipes.conv_reduce.codegen import finish_kernel_source, main_kernel_source
from htam_graph.rules.recipes.conv_reduce.launch import POOL_WINDOW_SOURCE, launch_constants, launcher_source
from htam_graph.rules.recipes.conv_reduce.norm import (
    WELFORD_COMBINE,
    stats_finish_source,
    stats_kernel_source,
    stats_launcher_source,
)
from htam_graph.rules.recipes.conv_reduce.plan import ConvReducePlan, plan_conv_reduce
from htam_graph.rules.recipes.elementwise.library_epilogue import _library_call, call_comment, fold_conv_bias
from htam_graph.rules.recipes.pooling.codegen import POOL_HELPERS_SOURCE

KEY = "fusion.conv_reduction_epilogue"
_STATS_CONSTANTS = (
    "STATS_BLOCK = 1024  # elements per Welford step of the norm statistics",
    "STATS_TARGET_PROGRAMS = 1024  # split the statistics of few, large groups across this many programs",
)


def _plan(view: TaskView) -> ConvReducePlan:
    """The plan with the conv module's bias moved into the fused epilogue (see library_epilogue's
    fold_conv_bias), or as written when the chain cannot take the bias add."""
    folded = fold_conv_bias(view.graph, view.graph.nodes[0]) if view.graph.nodes else None
    if folded is not None:
        try:
            return plan_conv_reduce(folded[0])
        except NotApplicable:
            pass
    return plan_conv_reduce(view.graph)


class ConvReduction(PlannedRecipe[ConvReducePlan]):
    """Recipe for `fusion.conv_reduction_epilogue`."""

    key = KEY
    default_config = KernelConfig(block=2048, num_warps=4)

    def plan(self, view: TaskView) -> ConvReducePlan:
        return _plan(view)

    def probe(self, view: TaskView, plan: ConvReducePlan) -> None:
        self._sources(plan, "probe", self.default_config)  # inexpressible ops fail here, not at emit time

    def render(self, view: TaskView, plan: ConvReducePlan, config: KernelConfig) -> str:
        stem = _stem(plan)
        kernels, launchers, helpers = self._sources(plan, stem, config)
        body = _dim_guards(plan)
        body.append(
            f"{plan.library_var} = {_library_call(view.graph, plan.library)}  "
            f"# {call_comment(view.graph, plan.library)}"
        )
        call = [plan.library_var]
        scalar_exprs = [s.expr for s in plan.scalars]
        if plan.norm is not None:
            stats_args = ", ".join([plan.library_var, f"self.{plan.norm.module_path}", *scalar_exprs])
            body.append(f"nmean, nrstd = norm_statistics_{stem}({stats_args})")
            call += ["nmean", "nrstd"]
        call += [leaf.expr for leaf in plan.leaves] + scalar_exprs
        call += [f"self.{p.module_path}" for p in plan.pools if plan.window_dims(p) is None]
        if plan.norm is not None and plan.norm.op == "nn_group_norm":
            call.append(f"self.{plan.norm.module_path}.num_groups")
        body.append(f"return fused_{stem}({', '.join(call)})")
        modules = any(plan.window_dims(p) is None for p in plan.pools)
        extra = [POOL_HELPERS_SOURCE, POOL_WINDOW_SOURCE] if modules else []
        constants = launch_constants(stem, config) + (list(_STATS_CONSTANTS) if plan.norm is not None else [])
        parts = SourceParts(
            recipe_key=KEY,
            config=config,
            task_key=view.task_key,
            summary=(
                f"{plan.library.op} stays a library call ({plan.library.origin});",
                f"its epilogue {plan.describe()} runs in {len(kernels)} Triton kernel(s), "
                "reading the conv output"
                + (" twice (norm statistics, then the fused kernel)." if plan.norm is not None else " once."),
            ),
            constants=tuple(constants),
            helpers=(*helper_sources(helpers), *((WELFORD_COMBINE,) if plan.norm is not None else ())),
            kernels=tuple(kernels),
            extra=tuple(extra),
            launchers=tuple(launchers),
            class_doc=f"{plan.library.op} (library) then {plan.describe()} fused per channel tile in Triton.",
            forward_body=tuple(body),
        )
        return render_file(parts, view.skeleton)

    @staticmethod
    def _sources(
        plan: ConvReducePlan, stem: str, config: KernelConfig
    ) -> tuple[list[str], list[str], set[str]]:
        kernels: list[str] = []
        launchers: list[str] = []
        helpers: set[str] = set()
        if plan.norm is not None:
            stats, stats_helpers = stats_kernel_source(plan, f"{stem}_stats_kernel")
            helpers |= stats_helpers
            kernels += [stats, stats_finish_source(f"{stem}_stats_finish_kernel")]
            launchers.append(
                stats_launcher_source(plan, stem, f"{stem}_stats_kernel", f"{stem}_stats_finish_kernel")
            )
        main, main_helpers = main_kernel_source(plan, f"{stem}_kernel")
        helpers |= main_helpers
        kernels.append(main)
        finish = None
        if plan.spatial is not None:
            finish = f"{stem}_finish_kernel"
            kernels.append(finish_kernel_source(plan, finish, helpers))
        launchers.append(launcher_source(plan, stem, f"{stem}_kernel", finish))
        return kernels, launchers, helpers


def _stem(plan: ConvReducePlan) -> str:
    ops: list[str] = []
    for step in plan.steps:
        if step.role in ("ew", "same"):
            continue
        op = step.node.op.removeprefix("nn_")
        if op not in ops:
            ops.append(op)
    return re.sub(r"\W", "_", "_".join(ops[:3]) + ("_etc" if len(ops) > 3 else "")) or "epilogue"


def _dim_guards(plan: ConvReducePlan) -> list[str]:
    (
        """Dims read from attributes (`self.dim`) shape the kernels: fail loudly if one changes after """
        """generation."""
    )
    lines: list[str] = []
    for step in plan.steps:
        dim = dict(step.node.params).get("dim")
        if isinstance(dim, AttrScalar) and f"self.{dim.path} != {dim.value!r}" not in "".join(lines):
            lines += [
                f"if self.{dim.path} != {dim.value!r}:  # the kernels were generated for this dim",
                f'    raise ValueError(f"{dim.path}={{self.{dim.path}}} differs from the generated '
                f"kernel's {dim.value!r}\")",
            ]
    return lines
