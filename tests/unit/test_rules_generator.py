"""The rules Generator port: applicability, rejections with reasons, replies, headers (no kernels run here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from htam_graph.model import (
    GenerationRequest,
    GlobalDirection,
    Language,
    LocalStrategy,
    PrecisionPolicy,
    Task,
)
from htam_graph.ports import Generator
from htam_graph.rules import KernelConfig, RulesGenerator, applies, parse_header, recipes_for
from htam_graph.rules.base import header_line

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"


def kb_task(rel: str) -> Task:
    source = (KB / rel).read_text(encoding="utf-8")
    return Task(
        key=f"kernelbench/{rel[:-3]}",
        suite="kernelbench",
        level=None,
        name=rel,
        source=source,
        source_sha256="0" * 64,
    )


def request(
    task: Task, key: str | None, direction: str | None = None, language: Language = Language.TRITON
) -> GenerationRequest:
    global_key = direction or (key or "").split(".")[0]
    strategy = None
    if key is not None:
        strategy = LocalStrategy(
            key=key, name=key, global_key=global_key, languages=[Language.TRITON], pattern=""
        )
    return GenerationRequest(
        task=task,
        step=0,
        direction=GlobalDirection(key=global_key, name=global_key, intent=""),
        strategy=strategy,
        base_source="",
        language=language,
        state_summary="",
    )


def test_rules_generator_is_a_generator_port() -> None:
    generator = RulesGenerator()
    assert isinstance(generator, Generator) and generator.name == "rules"
    assert {
        "fusion.elementwise_chain",
        "fusion.library_epilogue",
        "reduction_structure.row_softmax",
        "parallelism.block_size_tuning",
        "memory_access.vectorized_loads",
    } <= set(generator.keys)


@pytest.mark.parametrize(
    ("rel", "key", "reason"),
    [
        ("level1/2_Standard_matrix_multiplication_.py", "fusion.elementwise_chain", "matmul"),
        ("level1/40_LayerNorm.py", "reduction_structure.row_softmax", "not a single softmax"),
        (
            "level1/50_conv_standard_2D__square_input__square_kernel.py",
            "fusion.library_epilogue",
            "no epilogue",
        ),
        ("level1/26_GELU_.py", "fusion.library_epilogue", "does not start with a library op"),
        ("level1/26_GELU_.py", "reduction_structure.row_softmax", "not a single softmax"),
        ("level2/24_Conv3d_Min_Softmax.py", "fusion.library_epilogue", "not elementwise"),
        ("level1/24_LogSoftmax.py", "memory_access.vectorized_loads", "no kernel to tune"),
        ("level1/26_GELU_.py", "compute_efficiency.no_such_recipe", "no rule recipe"),
    ],
)
def test_applies_rejects_with_a_reason(rel: str, key: str, reason: str) -> None:
    verdict = applies(key, kb_task(rel))
    assert not verdict
    assert reason in verdict.reason


def test_recipes_for_lists_only_applicable_keys() -> None:
    assert recipes_for(kb_task("level1/26_GELU_.py"), "cuda", Language.TRITON) == [
        "fusion.elementwise_chain",
        "fusion.composed_kernels",
        "parallelism.block_size_tuning",
        "memory_access.vectorized_loads",
    ]
    assert recipes_for(kb_task("level1/24_LogSoftmax.py"), "cpu", Language.TRITON) == [
        "reduction_structure.row_softmax",
        "reduction_structure.online_logsumexp",
        "fusion.composed_kernels",
        "parallelism.block_size_tuning",
    ]
    assert recipes_for(kb_task("level1/40_LayerNorm.py")) == [
        "reduction_structure.single_pass_norm",
        "fusion.composed_kernels",
        "parallelism.block_size_tuning",
    ]
    assert recipes_for(kb_task("level1/92_cumsum_exclusive.py")) == ["reduction_structure.block_scan"]
    assert recipes_for(kb_task("level1/26_GELU_.py"), "cuda", Language.CUDA) == []


def test_generate_replies_without_source_and_with_the_reason() -> None:
    generator = RulesGenerator()
    reply = generator.generate(request(kb_task("level1/40_LayerNorm.py"), "fusion.elementwise_chain"))
    assert reply.source is None and reply.error is not None and "LayerNorm" in reply.error
    reply = generator.generate(
        request(kb_task("level1/26_GELU_.py"), "fusion.elementwise_chain", language=Language.CUDA)
    )
    assert reply.source is None and "Triton only" in (reply.error or "")
    reply = generator.generate(request(kb_task("level1/26_GELU_.py"), "data_reuse.shared_memory_tiling"))
    assert reply.source is None and "no rule recipe" in (reply.error or "")


def test_generate_without_a_strategy_picks_a_recipe_of_the_direction() -> None:
    reply = RulesGenerator().generate(
        request(kb_task("level2/76_Gemm_Add_ReLU.py"), None, direction="fusion")
    )
    assert reply.source is not None and reply.model == "rules/fusion.library_epilogue"
    assert reply.usage.cost_usd == 0.0


@pytest.mark.parametrize(
    ("rel", "key", "sizes"),
    [
        ("level1/20_LeakyReLU.py", "fusion.elementwise_chain", ["4096", "393216"]),
        ("level2/54_Conv2d_Multiply_LeakyReLU_GELU.py", "fusion.library_epilogue", ["254", "256"]),
        ("level1/24_LogSoftmax.py", "reduction_structure.row_softmax", ["4096", "393216"]),
    ],
)
def test_generated_source_is_standalone_and_hard_codes_no_size(rel: str, key: str, sizes: list[str]) -> None:
    from htam_graph.kernels_runtime.static_checks import analyse as static_analyse

    task = kb_task(rel)
    source = RulesGenerator().generate(request(task, key)).source
    assert source is not None
    for size in sizes:
        assert not re.search(rf"\b{size}\b", source), f"{size} is hard-coded"
    assert source.splitlines()[0] == header_line(key, parse_header(source).config)  # type: ignore[union-attr]
    assert (
        f"# Task: {task.key}" in source and "@triton.jit" in source and "class ModelNew(nn.Module):" in source
    )
    assert "try:" not in source and "Model(" not in source.replace("ModelNew(", "")
    report = static_analyse(source, PrecisionPolicy.FP32_STRICT, require_kernel=True)
    assert report.violations == [] and report.has_triton_kernel and report.defines_model_new
    compile(source, "<generated>", "exec")


def test_header_roundtrip_and_config_validation() -> None:
    config = KernelConfig(block=2048, num_warps=8, vector_hints=True)
    header = parse_header(header_line("fusion.elementwise_chain", config) + "\nimport torch\n")
    assert header is not None and header.recipe == "fusion.elementwise_chain" and header.config == config
    assert parse_header("import torch\n") is None
    assert (
        parse_header('# htam-rules: {"recipe": "x", "config": {"block": 1000}}\n') is None
    )  # not a power of 2
    with pytest.raises(ValueError):
        KernelConfig(num_warps=3)


class _RaisingRecipe:
    """A recipe with a defect: it applies, then raises while writing its kernel."""

    key = "fusion.elementwise_chain"
    default_config = KernelConfig()

    def check(self, view: object) -> object:
        from htam_graph.rules.base import Applicability

        return Applicability.yes()

    def emit(self, view: object, config: KernelConfig) -> str:
        raise KeyError("a recipe bug")


def test_a_recipe_that_raises_gives_no_code_with_the_error_not_a_crash() -> None:
    generator = RulesGenerator({"fusion.elementwise_chain": _RaisingRecipe()})  # type: ignore[dict-item]
    reply = generator.generate(request(kb_task("level1/26_GELU_.py"), "fusion.elementwise_chain"))
    assert reply.source is None
    assert "raised" in (reply.error or "") and "KeyError" in (reply.error or "")
