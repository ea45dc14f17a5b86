"""The TF32 recipes through the real SubprocessEvaluator (CPU, smoke shapes, Triton interpreter).

Under the tf32 policy the candidate is compared at the tf32 tolerance and its result is labelled tf32; under
fp32-strict the same file is rejected by the static check (TF32 switches are a precision downgrade there).
TF32 switches do nothing on the CPU: this tests the wiring, the labels and the rejection, not TF32 accuracy
(tests/gpu/test_rules_precision_gpu.py does that on the H200).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.model import (
    ErrorKind,
    EvalRequest,
    GenerationRequest,
    GlobalDirection,
    Language,
    LocalStrategy,
    PrecisionPolicy,
    Task,
)
from htam_graph.rules import RulesGenerator
from htam_graph.rules.recipes.elementwise.tf32 import TF32_CONVOLUTION, TF32_MATMUL

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"


def tf32_candidate(rel: str, key: str) -> tuple[Task, str]:
    source = (KB / rel).read_text(encoding="utf-8")
    task = Task(
        key=f"kernelbench/{rel[:-3]}", suite="kb", level=None, name=rel, source=source, source_sha256="0" * 64
    )
    reply = RulesGenerator().generate(
        GenerationRequest(
            task=task,
            step=1,
            direction=GlobalDirection(key="precision", name="precision", intent=""),
            strategy=LocalStrategy(
                key=key, name=key, global_key="precision", languages=[Language.TRITON], pattern=""
            ),
            base_source="",
            language=Language.TRITON,
            state_summary="",
            device="cpu",
            precision_policy=PrecisionPolicy.TF32,
        )
    )
    assert reply.source is not None, reply.error
    return task, reply.source


def evaluate(task: Task, candidate: str, policy: PrecisionPolicy):  # type: ignore[no-untyped-def]
    return SubprocessEvaluator().evaluate(
        EvalRequest(
            task_key=task.key,
            task_source=task.source,
            candidate_source=candidate,
            device="cpu",
            shape="smoke",
            precision_policy=policy,
            trials=2,
            extra_shapes=0,
            timing_runs=1,
            warmup_runs=0,
            measure_baselines=False,
            timeout_s=600,
        )
    )


@pytest.mark.parametrize(
    ("rel", "key"),
    [
        ("level2/76_Gemm_Add_ReLU.py", TF32_MATMUL),
        ("level2/54_Conv2d_Multiply_LeakyReLU_GELU.py", TF32_CONVOLUTION),
    ],
)
def test_tf32_candidate_is_checked_at_the_tf32_tolerance_and_labelled(rel: str, key: str) -> None:
    task, candidate = tf32_candidate(rel, key)
    result = evaluate(task, candidate, PrecisionPolicy.TF32)
    assert result.error_kind is None, result.error_excerpt
    assert result.correct and result.precision_policy is PrecisionPolicy.TF32
    assert (result.rtol, result.atol) == (1e-2, 1e-2)  # the tf32 policy's tolerance, not fp32's 1e-4
    assert result.checks["kernel_launched"].startswith("pass")  # the fp32 Triton epilogue still runs
    assert "tf32" in result.checks["tf32_pinned_off"]


def test_the_same_file_is_rejected_under_fp32_strict() -> None:
    task, candidate = tf32_candidate("level2/76_Gemm_Add_ReLU.py", TF32_MATMUL)
    result = evaluate(task, candidate, PrecisionPolicy.FP32_STRICT)
    assert not result.correct and result.error_kind is ErrorKind.HACK_DETECTED
    assert (
        result.checks["static_source"].startswith("fail") and "allow_tf32" in result.checks["static_source"]
    )
    assert result.precision_policy is PrecisionPolicy.FP32_STRICT


def test_loop_under_the_tf32_policy_runs_the_recipe_and_labels_the_step(store) -> None:  # type: ignore[no-untyped-def]
    from htam_graph import memory
    from htam_graph.loop import OptimizationLoop, RunConfig
    from htam_graph.seed import load_seed
    from htam_graph.settings import PolicySettings

    memory.seed_memory(store, load_seed())
    task, _ = tf32_candidate("level2/76_Gemm_Add_ReLU.py", TF32_MATMUL)
    cfg = RunConfig(device="cpu", shape="smoke", steps=1, trials=2, precision_policy=PrecisionPolicy.TF32)
    loop = OptimizationLoop(
        store, SubprocessEvaluator(), RulesGenerator(), PolicySettings(), cfg,
        executable_locals=lambda t: [TF32_MATMUL],
    )  # fmt: skip
    (step,) = loop.run(task).steps
    assert step.local_key == TF32_MATMUL and step.status != "failed", step.error_excerpt
    assert step.result is not None and step.result.precision_policy is PrecisionPolicy.TF32
    assert "Tf32MatmulScope" in (step.source or "")
