"""precision.tf32_matmul / precision.tf32_convolution: applicable only under the tf32 policy, with reasons; the
generated file scopes TF32 to the library call; the runtime's static check still rejects it under fp32-strict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from htam_graph.kernels_runtime import static_checks
from htam_graph.model import (
    GenerationRequest,
    GlobalDirection,
    Language,
    LocalStrategy,
    PrecisionPolicy,
    Task,
)
from htam_graph.rules import RulesGenerator, applies, parse_header, recipes_for
from htam_graph.rules.recipes.elementwise.tf32 import TF32_CONVOLUTION, TF32_MATMUL

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
TF32 = PrecisionPolicy.TF32
STRICT = PrecisionPolicy.FP32_STRICT
GEMM = "level2/76_Gemm_Add_ReLU.py"
CONV = "level2/54_Conv2d_Multiply_LeakyReLU_GELU.py"


def kb_task(rel: str) -> Task:
    source = (KB / rel).read_text(encoding="utf-8")
    return Task(
        key=f"kernelbench/{rel[:-3]}", suite="kb", level=None, name=rel, source=source, source_sha256="0" * 64
    )


def request(task: Task, key: str, policy: PrecisionPolicy) -> GenerationRequest:
    return GenerationRequest(
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
        precision_policy=policy,
    )


@pytest.mark.parametrize(("rel", "key"), [(GEMM, TF32_MATMUL), (CONV, TF32_CONVOLUTION)])
def test_applies_only_under_the_tf32_policy(rel: str, key: str) -> None:
    assert applies(key, kb_task(rel), TF32)
    verdict = applies(key, kb_task(rel), STRICT)
    assert not verdict and "only under the tf32 precision policy" in verdict.reason
    assert "fp32-strict" in verdict.reason
    assert not applies(key, kb_task(rel), PrecisionPolicy.BF16)


@pytest.mark.parametrize(
    ("rel", "key", "reason"),
    [
        (CONV, TF32_MATMUL, "matmul / linear"),
        (GEMM, TF32_CONVOLUTION, "convolution"),
        ("level1/2_Standard_matrix_multiplication_.py", TF32_MATMUL, "no epilogue"),  # no kernel would launch
        ("level1/26_GELU_.py", TF32_MATMUL, "does not start with"),
    ],
)
def test_rejected_where_it_does_not_apply(rel: str, key: str, reason: str) -> None:
    verdict = applies(key, kb_task(rel), TF32)
    assert not verdict and reason in verdict.reason


def test_recipes_for_lists_the_precision_track_only_under_tf32() -> None:
    strict = recipes_for(kb_task(GEMM), "cpu", Language.TRITON)
    relaxed = recipes_for(kb_task(GEMM), "cpu", Language.TRITON, TF32)
    assert TF32_MATMUL not in strict and not any(k.startswith("precision.") for k in strict)
    assert set(relaxed) - set(strict) == {TF32_MATMUL}


def test_generator_gets_the_policy_from_the_request() -> None:
    generator = RulesGenerator()
    reply = generator.generate(request(kb_task(GEMM), TF32_MATMUL, STRICT))
    assert reply.source is None and "only under the tf32 precision policy" in (reply.error or "")
    reply = generator.generate(request(kb_task(GEMM), TF32_MATMUL, TF32))
    assert reply.source is not None, reply.error
    header = parse_header(reply.source)
    assert header is not None and header.recipe == TF32_MATMUL
    src = reply.source
    assert "with Tf32MatmulScope():  # TF32 for this library call only" in src
    assert "linear_epilogue(" in src  # the fused fp32 epilogue is kept
    assert "PRECISION POLICY tf32" in src


@pytest.mark.parametrize(
    ("rel", "key", "switch"),
    [(GEMM, TF32_MATMUL, "cuda.matmul.allow_tf32"), (CONV, TF32_CONVOLUTION, "cudnn.allow_tf32")],
)
def test_static_check_rejects_it_under_fp32_strict_only(rel: str, key: str, switch: str) -> None:
    source = RulesGenerator().generate(request(kb_task(rel), key, TF32)).source
    assert source is not None
    strict = static_checks.analyse(source, STRICT, True)
    assert strict.violations and all(switch in v and "fp32-strict" in v for v in strict.violations)
    assert static_checks.analyse(source, TF32, True).violations == []


def _scope_class(source: str, name: str) -> Any:
    """Only the generated scope class, executed on its own (it needs nothing but torch)."""
    start = source.index(f"class {name}:")
    end = source.index("\n\n\nclass ModelNew(")
    namespace: dict[str, Any] = {"torch": torch}
    exec(source[start:end], namespace)  # noqa: S102 - our own generated code, in a test
    return namespace[name]


def test_the_scope_enables_tf32_inside_and_restores_the_switch() -> None:
    source = RulesGenerator().generate(request(kb_task(CONV), TF32_CONVOLUTION, TF32)).source or ""
    scope = _scope_class(source, "Tf32ConvolutionScope")
    saved = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = False
        with scope():
            assert torch.backends.cudnn.allow_tf32 is True
        assert torch.backends.cudnn.allow_tf32 is False
        with pytest.raises(RuntimeError), scope():
            raise RuntimeError("the library call failed")
        assert torch.backends.cudnn.allow_tf32 is False  # restored on an exception too
    finally:
        torch.backends.cudnn.allow_tf32 = saved


def test_run_backend_hook_follows_the_precision_policy() -> None:
    from htam_graph.generators import make_backend

    _, _, relaxed = make_backend("rules", None, None, precision_policy=TF32)
    _, _, strict = make_backend("rules", None, None)
    assert TF32_MATMUL in relaxed(kb_task(GEMM)) and TF32_MATMUL not in strict(kb_task(GEMM))
