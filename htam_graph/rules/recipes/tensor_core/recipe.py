"""compute_efficiency.tensor_core_fp32_emulation: large GEMMs and convs on tensor cores in 3xTF32.

The forward is composed as `fusion.composed_kernels` composes it (rules/compose/): fused Triton kernels for
the elementwise ops and reductions, PyTorch calls for the rest; but every GEMM (linear, matmul, mm, bmm) large
enough to be compute-bound becomes the file's own 3xTF32 GEMM kernel (gemm.py) instead of cuBLAS's fp32 GEMM,
and every compute-bound forward convolution (conv1d/2d/3d, groups 1, zero padding) the file's own 3xTF32
implicit-GEMM conv kernel (conv.py) instead of cuDNN's fp32 conv: both libraries run fp32 on the CUDA cores.
A forward that is one GEMM or conv alone gets that kernel alone. Smaller GEMMs and convs, matrix-vector
products, grouped convs and every other library op stay PyTorch calls.
"""

from __future__ import annotations

import dataclasses

from htam_graph.rules.analysis.skeleton import check_zero_padding_mode
from htam_graph.rules.base import KernelConfig, NotApplicable, PlannedRecipe, TaskView
from htam_graph.rules.codegen.model_file import render_file
from htam_graph.rules.compose import ComposedPlan, composed_parts, plan_composed, probe_composed
from htam_graph.rules.compose.partition import TorchStage
from htam_graph.rules.compose.torch_calls import StageCall, torch_call
from htam_graph.rules.ops import OpGraph, OpNode
from htam_graph.rules.recipes.depthwise.codegen import CONV_GEOMETRY_SOURCE
from htam_graph.rules.recipes.tensor_core.conv import (
    CONV_KERNEL_SOURCE,
    CONV_LAUNCHER_SOURCE,
    conv_call,
    conv_compute_bound,
)
from htam_graph.rules.recipes.tensor_core.gemm import (
    GEMM_KERNEL_SOURCE,
    GEMM_LAUNCHER_SOURCE,
    compute_bound,
    gemm_call,
)

__all__ = ["KEY", "TensorCoreGemm", "tensor_core_op"]

KEY = "compute_efficiency.tensor_core_fp32_emulation"


def tensor_core_op(view: TaskView, graph: OpGraph, node: OpNode) -> str | None:
    """ "gemm" or "conv" when the file's 3xTF32 kernel computes `node`, None when it stays a PyTorch call.

    A conv module's padding_mode is not in the graph: any padding_mode other than a literal 'zeros' in
    __init__ keeps the task's convs on cuDNN."""
    if compute_bound(graph, node):
        return "gemm"
    if conv_compute_bound(graph, node) and _zero_padding_only(view):
        return "conv"
    return None


def _stage_call(view: TaskView) -> StageCall:
    """How the forward writes a kept stage: a compute-bound GEMM / conv as the file's 3xTF32 kernel, any
    other as its PyTorch call."""

    def call(graph: OpGraph, node: OpNode, computed: dict[str, str]) -> str:
        kind = tensor_core_op(view, graph, node)
        if kind == "gemm":
            return gemm_call(graph, node, computed)
        if kind == "conv":
            return conv_call(graph, node, computed)
        return torch_call(graph, node, computed)

    return call


def _zero_padding_only(view: TaskView) -> bool:
    try:
        check_zero_padding_mode(view.skeleton.init_source)
    except NotApplicable:
        return False
    return True


class TensorCoreGemm(PlannedRecipe[ComposedPlan]):
    """Recipe for `compute_efficiency.tensor_core_fp32_emulation`."""

    key = KEY
    keeps_calls = True
    default_config = KernelConfig(block=4096, num_warps=4)  # the fused groups' (GEMM and conv pick tiles)

    def plan(self, view: TaskView) -> ComposedPlan:
        plan = plan_composed(view, needs_fusion=False)
        if not _kinds(view, plan):
            raise NotApplicable("the forward has no fp32 GEMM or conv large enough to be compute-bound")
        return plan

    def probe(self, view: TaskView, plan: ComposedPlan) -> None:
        probe_composed(plan, _stage_call(view))

    def render(self, view: TaskView, plan: ComposedPlan, config: KernelConfig) -> str:
        parts = composed_parts(view, plan, config, KEY, _stage_call(view))
        kinds = _kinds(view, plan)
        described = plan.describe(
            lambda n: "Triton 3xTF32" if tensor_core_op(view, plan.graph, n) else "PyTorch"
        )
        kernels, launchers, extra = [], [], []
        if "gemm" in kinds:
            kernels.append(GEMM_KERNEL_SOURCE)
            launchers.append(GEMM_LAUNCHER_SOURCE)
        if "conv" in kinds:
            kernels.append(CONV_KERNEL_SOURCE)
            launchers.append(CONV_LAUNCHER_SOURCE)
            extra.append(CONV_GEOMETRY_SOURCE)
        ops = " and ".join({"gemm": "GEMM", "conv": "convolution"}[k] for k in sorted(kinds, reverse=True))
        parts = dataclasses.replace(
            parts,
            summary=(
                f"Composed from the forward's ops: {described}.",
                f"Each compute-bound fp32 {ops} is a Triton kernel on tensor cores in 3xTF32",
                "(error-compensated TF32, fp32-level accuracy); each fused group is one fp32 Triton kernel.",
            ),
            kernels=(*kernels, *parts.kernels),
            extra=(*extra, *parts.extra),
            launchers=(*launchers, *parts.launchers),
            class_doc=f"Composed: {described}.",
        )
        return render_file(parts, view.skeleton)


def _kinds(view: TaskView, plan: ComposedPlan) -> set[str]:
    """Which of the file's 3xTF32 kernels ("gemm", "conv") the forward calls."""
    kept = [s.node for s in plan.stages if isinstance(s, TorchStage)]
    return {kind for node in kept if (kind := tensor_core_op(view, plan.graph, node)) is not None}
