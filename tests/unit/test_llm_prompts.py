"""Prompt rendering: every part of the request reaches the prompt, rules follow language and policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.errors import ConfigError
from htam_graph.llm.prompts import load_templates, render_prompt
from htam_graph.model import (
    GenerationRequest,
    GlobalDirection,
    Language,
    LocalStrategy,
    PrecisionPolicy,
    Task,
)


def make_request(**changes: object) -> GenerationRequest:
    task = Task(
        key="kernelbench/level1/1_Square_matrix_multiplication_",
        suite="kernelbench",
        level=1,
        name="1_Square_matrix_multiplication_",
        source="class Model(nn.Module):\n    def forward(self, A, B):\n        return torch.matmul(A, B)  # $HOME stays\n",
        source_sha256="0" * 64,
        op_tags=["matmul", "gemm"],
    )
    request = GenerationRequest(
        task=task,
        step=3,
        direction=GlobalDirection(
            key="tiling",
            name="Tiling and reuse",
            intent="Reuse operands from shared memory.",
            goals=["raise arithmetic intensity"],
        ),
        strategy=LocalStrategy(
            key="smem_tiles",
            name="Shared-memory tiles",
            global_key="tiling",
            languages=[Language.CUDA],
            pattern="Load 32x32 tiles of A and B into shared memory.",
            checks=["occupancy >= 50%"],
            risks=["bank conflicts"],
        ),
        base_source="class ModelNew(nn.Module):\n    pass  # BASE-MARKER\n",
        language=Language.CUDA,
        state_summary="step 2: mismatch max_abs_err=3.1e-2 (STATE-MARKER)",
        memory_context="Positive example: tile 32, +2.1x (MEMORY-MARKER)",
    )
    return request.model_copy(update=changes)


def test_every_part_of_the_request_reaches_the_prompt() -> None:
    prompt = render_prompt(make_request())
    assert "MEMORY-MARKER" in prompt.memory and "MEMORY-MARKER" not in prompt.user + prompt.system
    for marker in ("BASE-MARKER", "STATE-MARKER", "torch.matmul(A, B)", "$HOME stays", "Tiling and reuse", "`tiling`",
                   "raise arithmetic intensity", "Shared-memory tiles", "32x32 tiles", "occupancy >= 50%", "bank conflicts",
                   "matmul, gemm", "Step 3", "kernelbench/level1/1_Square_matrix_multiplication_"):  # fmt: skip
        assert marker in prompt.user, marker
    assert "$" not in prompt.system  # no placeholder left unfilled


def test_system_prompt_states_the_rules_for_the_language_and_policy() -> None:
    cuda = render_prompt(make_request()).system
    assert "class ModelNew(nn.Module)" in cuda and "```python" in cuda
    assert "load_inline" in cuda and "__global__" in cuda and "@triton.jit" not in cuda
    assert "fp32-strict" in cuda and "TF32" in cuda and "1e-4" in cuda
    assert "fall back to PyTorch" in cuda and "streams" in cuda and "timers" in cuda
    triton = render_prompt(
        make_request(language=Language.TRITON, precision_policy=PrecisionPolicy.BF16)
    ).system
    assert "@triton.jit" in triton and "load_inline" not in triton
    assert "bf16" in triton and "fp32-strict" not in triton


def test_system_prompt_is_stable_across_steps_for_caching() -> None:
    a = render_prompt(make_request())
    b = render_prompt(make_request(step=9, state_summary="other", base_source="x = 1\n"))
    assert a.system == b.system and a.memory == b.memory and a.user != b.user


def test_no_memory_and_no_strategy() -> None:
    prompt = render_prompt(make_request(memory_context="  ", strategy=None, state_summary=""))
    assert prompt.memory == ""
    assert "No specific strategy" in prompt.user and "first attempt" in prompt.user


def test_templates_can_be_overridden_from_a_directory(tmp_path: Path) -> None:
    (tmp_path / "step.md").write_text("STEP $step OF $task_key\n")
    prompt = render_prompt(make_request(), load_templates(tmp_path))
    assert prompt.user == "STEP 3 OF kernelbench/level1/1_Square_matrix_multiplication_"
    assert "class ModelNew" in prompt.system  # the other templates are the packaged ones


def test_a_template_with_an_unknown_placeholder_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "step.md").write_text("$no_such_value\n")
    with pytest.raises(ConfigError, match="step.md"):
        render_prompt(make_request(), load_templates(tmp_path))
    with pytest.raises(ConfigError, match="does not exist"):
        load_templates(tmp_path / "missing")
