"""compute_efficiency.tensor_core_fp32_emulation: the forward's large GEMMs on tensor cores in 3xTF32.

The forward is composed as `fusion.composed_kernels` composes it (rules/compose/): fused Triton kernels for
the elementwise ops and reductions, PyTorch calls for the rest; but every GEMM (linear, matmul, mm, bmm) large
enough to be compute-bound becomes the file's own 3xTF32 GEMM kernel (gemm.py) instead of cuBLAS's fp32 GEMM,
which runs on the CUDA cores. A forward that is a GEMM alone (a plain matmul task) gets the GEMM kernel alone.
Smaller GEMMs, matrix-vector products and every other library op stay PyTorch calls.
"""

from __future__ import annotations

import dataclasses

from htam_graph.rules.base import KernelConfig, NotApplicable, PlannedRecipe, TaskView
from htam_graph.rules.codegen.model_file import render_file
from htam_graph.rules.compose import ComposedPlan, composed_parts, plan_composed, probe_composed
from htam_graph.rules.compose.partition import TorchStage
from htam_graph.rules.compose.torch_calls import torch_call
from htam_graph.rules.ops import OpGraph, OpNode
from htam_graph.rules.recipes.tensor_core.gemm import (
    GEMM_KERNEL_SOURCE,
    GEMM_LAUNCHER_SOURCE,
    compute_bound,
    gemm_call,
)

__all__ = ["KEY", "TensorCoreGemm"]

KEY = "compute_efficiency.tensor_core_fp32_emulation"


def _call(graph: OpGraph, node: OpNode, computed: dict[str, str]) -> str:
    """A compute-bound GEMM as the file's 3xTF32 kernel; any other kept stage as its PyTorch call."""
    if compute_bound(graph, node):
        return gemm_call(graph, node, computed)
    return torch_call(graph, node, computed)


class TensorCoreGemm(PlannedRecipe[ComposedPlan]):
    """Recipe for `compute_efficiency.tensor_core_fp32_emulation`."""

    key = KEY
    default_config = KernelConfig(block=4096, num_warps=4)  # the fused groups' (the GEMM picks its tiles)

    def plan(self, view: TaskView) -> ComposedPlan:
        plan = plan_composed(view, needs_fusion=False)
        kept = [s.node for s in plan.stages if isinstance(s, TorchStage)]
        if not any(compute_bound(plan.graph, node) for node in kept):
            raise NotApplicable("the forward has no fp32 GEMM large enough to be compute-bound")
        return plan

    def probe(self, view: TaskView, plan: ComposedPlan) -> None:
        probe_composed(plan, _call)

    def render(self, view: TaskView, plan: ComposedPlan, config: KernelConfig) -> str:
        parts = composed_parts(view, plan, config, KEY, _call)
        described = plan.describe(lambda n: "Triton 3xTF32" if compute_bound(plan.graph, n) else "PyTorch")
        parts = dataclasses.replace(
            parts,
            summary=(
                f"Composed from the forward's ops: {described}.",
                "Each compute-bound fp32 GEMM is a Triton kernel on tensor cores in 3xTF32",
                "(error-compensated TF32, fp32-level accuracy); each fused group is one fp32 Triton kernel.",
            ),
            kernels=(GEMM_KERNEL_SOURCE, *parts.kernels),
            launchers=(GEMM_LAUNCHER_SOURCE, *parts.launchers),
            class_doc=f"Composed: {described}.",
        )
        return render_file(parts, view.skeleton)
