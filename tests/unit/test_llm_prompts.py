"""Prompt rendering: every part of the request reaches the prompt once, in cache-friendly order; the rules follow
language and policy; the feedback shows the failed code with line numbers that fit; the CPU is described
honestly; the GPU facts are formatted (and absent cleanly)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from htam_graph.devicefacts import GpuFacts, InputSpec, KernelTime, NcuSummary
from htam_graph.errors import ConfigError
from htam_graph.llm.device_text import best_section, device_section
from htam_graph.llm.prompts import load_templates, render_prompt
from htam_graph.model import (
    ArchEvidence,
    ErrorKind,
    EvalResult,
    GenerationRequest,
    GlobalDirection,
    Language,
    LocalStrategy,
    LocalWithEvidence,
    PrecisionPolicy,
    Task,
    Usage,
)
from htam_graph.runtypes import RunResult, StepOutcome
from htam_graph.state import memory_context, reference_as_candidate, state_summary

TASK_SOURCE = (
    "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, A, B):\n"
    "        return torch.matmul(A, B)  # $HOME stays\n\nN = 64\n\ndef get_inputs():\n"
    "    return [torch.rand(N, N), torch.rand(N, N)]\n\ndef get_init_inputs():\n    return []\n"
)
TASK = Task(
    key="kernelbench/level1/1_Square_matrix_multiplication_",
    suite="kernelbench",
    level=1,
    name="1_Square_matrix_multiplication_",
    source=TASK_SOURCE,
    source_sha256="0" * 64,
    op_tags=["matmul", "gemm"],
)
STRATEGY = LocalStrategy(
    key="smem_tiles",
    name="Shared-memory tiles",
    global_key="tiling",
    languages=[Language.CUDA],
    pattern="Load 32x32 tiles of A and B into shared memory.",
    checks=["occupancy >= 50%"],
    risks=["bank conflicts"],
)
KERNEL = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    pass  # BASE-MARKER\n"


def make_request(**changes: object) -> GenerationRequest:
    request = GenerationRequest(
        task=TASK,
        step=3,
        direction=GlobalDirection(
            key="tiling",
            name="Tiling and reuse",
            intent="Reuse operands from shared memory.",
            goals=["raise arithmetic intensity"],
        ),
        strategy=STRATEGY,
        base_source=KERNEL,
        language=Language.CUDA,
        state_summary="step 2: mismatch max_abs_err=3.1e-2 (STATE-MARKER)",
        memory_context=memory_context(LocalWithEvidence(strategy=STRATEGY), []) + "\nMEMORY-MARKER",
    )
    return request.model_copy(update=changes)


def _all(prompt: object) -> str:
    return "\n".join(getattr(prompt, part) for part in ("system", "memory", "user"))


def test_every_part_of_the_request_reaches_the_prompt() -> None:
    prompt = render_prompt(make_request())
    assert "MEMORY-MARKER" in prompt.memory and "MEMORY-MARKER" not in prompt.user + prompt.system
    for marker in ("BASE-MARKER", "STATE-MARKER", "Tiling and reuse", "`tiling`", "raise arithmetic intensity",
                   "Shared-memory tiles", "`smem_tiles`", "Step 3"):  # fmt: skip
        assert marker in prompt.user, marker
    for marker in ("torch.matmul(A, B)", "$HOME stays", "matmul, gemm", TASK.key):
        assert marker in prompt.system, marker  # the task is stable for the run: before the memory
    for marker in ("32x32 tiles", "occupancy >= 50%", "bank conflicts"):
        assert marker in prompt.memory, marker
    assert "$" not in prompt.system.replace("$HOME", "")  # no placeholder left unfilled


def test_the_strategy_text_and_the_reference_appear_once() -> None:
    """Noise the study found: the strategy's description twice, the reference (with get_inputs) repeated as
    the 'current best' on the first steps."""
    prompt = _all(render_prompt(make_request(base_source=reference_as_candidate(TASK_SOURCE))))
    assert prompt.count("Load 32x32 tiles of A and B") == 1
    assert prompt.count("def get_inputs") == 1 and prompt.count("torch.matmul(A, B)") == 1
    assert "The reference itself" in prompt


def test_system_prompt_states_the_rules_for_the_language_and_policy() -> None:
    cuda = render_prompt(make_request()).system
    assert "class ModelNew(nn.Module)" in cuda and "```python" in cuda
    assert "load_inline" in cuda and "__global__" in cuda and "@triton.jit" not in cuda
    assert "fp32-strict" in cuda and "TF32" in cuda and "1e-4" in cuda
    assert "switches to torch" in cuda and "streams" in cuda and "timers" in cuda
    triton = render_prompt(
        make_request(language=Language.TRITON, precision_policy=PrecisionPolicy.BF16)
    ).system
    assert "@triton.jit" in triton and "load_inline" not in triton
    assert "bf16" in triton and "fp32-strict" not in triton


def test_stable_text_comes_first_and_does_not_change_across_steps() -> None:
    a = render_prompt(make_request())
    b = render_prompt(make_request(step=9, state_summary="other", base_source="x = 1\n"))
    assert a.system == b.system and a.memory == b.memory and a.user != b.user
    assert "Step 3" not in a.system and "STATE-MARKER" not in a.system + a.memory


def test_no_memory_and_no_strategy() -> None:
    prompt = render_prompt(make_request(memory_context="  ", strategy=None, state_summary=""))
    assert prompt.memory == ""
    assert "No specific strategy" in prompt.user and "first attempt" in prompt.user
    assert "STRATEGY: none" in prompt.user


def test_the_model_may_answer_that_no_strategy_applies() -> None:
    prompt = render_prompt(make_request())
    assert "STRATEGY: none" in prompt.user and "STRATEGY: none" in prompt.system
    assert "within the direction" in prompt.user


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


# ------------------------------------------------------------------------------------------ feedback
BASE = "\n".join(f"line_{i} = {i}" for i in range(1, 41)) + "\nclass ModelNew:\n    pass\n"


def _outcome(step: int, source: str, result: EvalResult | None, **kw: object) -> StepOutcome:
    values: dict[str, object] = dict(
        step=step, global_key="fusion", local_key="fusion.x", direction_probability=0.5, status="failed",
        error_kind=None, error_excerpt="", speedup_x=None, best_speedup_x=1.0, gain=0.0, source=source,
        result=result, usage=Usage(), attempt_key=f"a{step}",
    )  # fmt: skip
    values.update(kw)
    return StepOutcome(**values)  # type: ignore[arg-type]


def _run(best_source: str, steps: list[StepOutcome], **kw: object) -> RunResult:
    result = RunResult("run-1", TASK.key, best_source, False, 1, 1.0, None, steps=steps)
    for k, v in kw.items():
        setattr(result, k, v)
    return result


def test_the_failed_candidate_is_shown_and_the_excerpt_line_points_into_it() -> None:
    """The study: after a failure the prompt showed the best kernel and an excerpt line number in a file the
    model never saw. Now the failed code is shown, numbered as the worker's file is, and the excerpt names it."""
    failed = BASE.replace("line_20 = 20", "line_20 = tl.exp(v, 3)")
    excerpt = "  candidate_0123456789abcdef.py:20 in k: line_20 = tl.exp(v, 3)\nTypeError: exp() got 2 values"
    result = EvalResult(
        compiled=True, correct=False, error_kind=ErrorKind.RUNTIME_ERROR, error_excerpt=excerpt
    )
    last = _outcome(2, failed, result, error_kind=ErrorKind.RUNTIME_ERROR, error_excerpt=excerpt)
    text = state_summary(TASK, _run(BASE, [last]), last)
    assert "candidate.py:20" in text and "candidate_0123456789abcdef" not in text
    assert "The failed candidate" in text and "```diff" in text  # a one-line change: shown as a diff
    numbered = dict(
        (int(m.group(1)), m.group(2)) for m in re.finditer(r"^\s*(\d+) [+ ] (.*)$", text, re.MULTILINE)
    )
    assert numbered[20] == "line_20 = tl.exp(v, 3)"  # the excerpt's line 20 is the line shown as 20
    assert "- line_20 = 20" in text


def test_a_large_change_is_shown_as_the_whole_numbered_source() -> None:
    failed = "\n".join(f"other_{i} = {i}" for i in range(1, 60)) + "\n"
    result = EvalResult(compiled=False, correct=False, error_kind=ErrorKind.COMPILE_ERROR, error_excerpt="E")
    last = _outcome(2, failed, result, error_kind=ErrorKind.COMPILE_ERROR, error_excerpt="E")
    text = state_summary(TASK, _run(BASE, [last]), last)
    assert "```diff" not in text and "Its source, numbered" in text
    assert re.search(r"^33 \| other_33 = 33$", text, re.MULTILINE)


def test_a_correct_step_reports_its_margin_against_the_tolerance() -> None:
    cand = BASE.replace("line_3 = 3", "line_3 = 4")
    r = EvalResult(compiled=True, correct=True, max_abs_err=2.5e-5, atol=1e-4, runtime_us=50.0,
                   ref_eager_us=100.0, speedup_eager_x=2.0, gpu_arch="sm_90")  # fmt: skip
    last = _outcome(2, cand, r, status="correct", speedup_x=2.0, best_speedup_x=2.5)
    text = state_summary(TASK, _run(BASE, [last], best_speedup_x=2.5), last)
    assert "max abs err 2.5e-05 = 25% of atol 0.0001" in text
    assert "not faster than the best (2.50x)" in text and "That candidate (correct, not kept)" in text


def test_a_mismatch_reports_how_far_outside_the_tolerance_it_was() -> None:
    r = EvalResult(compiled=True, correct=False, error_kind=ErrorKind.MISMATCH, max_abs_err=3e-2,
                   max_rel_err=0.5, atol=1e-4)  # fmt: skip
    last = _outcome(2, BASE + "# x\n", r, error_kind=ErrorKind.MISMATCH)
    assert "max abs err 0.03 = 300x atol 0.0001" in state_summary(TASK, _run(BASE, [last]), last)


def test_cpu_feedback_claims_no_speed() -> None:
    """CPU timings moved 86x between steps in the study: on the CPU no x-factor and no µs is printed."""
    r = EvalResult(compiled=True, correct=True, max_abs_err=1e-6, atol=1e-4, runtime_us=9000.0,
                   ref_eager_us=100.0, speedup_eager_x=0.011, timing_on_cpu=True, device="cpu",
                   gpu_arch="cpu")  # fmt: skip
    first = _outcome(1, BASE, r, status="correct", speedup_x=0.011)
    second = _outcome(2, BASE + "# v2\n", r, status="correct", speedup_x=0.95)
    text = state_summary(TASK, _run(BASE + "# v2\n", [first, second], best_step=2), second, "cpu")
    assert not re.search(r"\d\.\d+x", text) and "µs" not in text
    assert "latest correct candidate" in text and "speed is not measured" in text


# ------------------------------------------------------------------------------------------ memory text
def _local(key: str, pattern: str, *arch: ArchEvidence) -> LocalWithEvidence:
    strategy = LocalStrategy(
        key=key, name=key, global_key="fusion", languages=[Language.TRITON], pattern=pattern
    )
    return LocalWithEvidence(strategy=strategy, by_arch=list(arch))


def test_evidence_is_this_gpus_with_foreign_evidence_labelled_and_no_empty_lines() -> None:
    here = ArchEvidence(gpu_arch="sm_90", improved=1, correct=2, failed=1, gain_sum=0.4)
    there = ArchEvidence(gpu_arch="sm_80", failed=3)
    alt = _local("fusion.alt", "Fuse the chain (e.g. bias, then GELU) into one kernel. Then tune it.")
    text = memory_context(
        _local("fusion.main", "Do the thing.", here, there), [], alternatives=[alt], gpu_arch="sm_90",
        foreign_weight=0.5,
    )  # fmt: skip
    assert "Evidence on this GPU (sm_90): 4 attempts (1 faster, 2 correct but not faster, 1 failed)" in text
    assert "Evidence from other GPUs (weighted 0.5 in the choice): sm_80: 3 attempts (3 failed)" in text
    assert "0 attempts" not in text and "Evidence" not in text.split("fusion.alt")[1]  # untried: no line
    # an alternative is described by its whole first sentence, never cut after "e.g."
    assert "Fuse the chain (e.g. bias, then GELU) into one kernel." in text and "Then tune it" not in text


def test_on_the_cpu_gpu_evidence_is_labelled_as_not_measured_here() -> None:
    local = _local("fusion.main", "Do.", ArchEvidence(gpu_arch="sm_90", improved=2, gain_sum=0.3))
    text = memory_context(local, [], gpu_arch="cpu")
    assert "Evidence from GPU runs (this run is on the CPU and adds none): sm_90: 2 attempts" in text


# ------------------------------------------------------------------------------------------ device facts
FACTS = GpuFacts(
    device="cuda", gpu_name="NVIDIA H200", gpu_arch="sm_90", sm_count=132, l2_bytes=60 * 2**20,
    memory_bytes=141 * 2**30, bandwidth_gbs=4300.0, bandwidth_source="H200: measured D2D copy 4.3 TB/s",
    torch_version="2.13.0", triton_version="3.7.1", cuda_version="12.8", tf32_off=True, shape_variant="default",
    inputs=[InputSpec(shape=[64, 64], dtype="float32"), InputSpec(value="3")], ref_eager_us=20.0, sol_us=5.0,
    bytes_floor_us=5.0, flop_floor_us=0.5, eager_kernel_us=18.0,
    eager_kernels=[KernelTime(name="sm90_xmma_gemm", time_us=15.0, share=0.83),
                   KernelTime(name="elementwise_kernel", time_us=3.0, share=0.17, calls=2)],
)  # fmt: skip


def test_gpu_facts_reach_the_system_prompt() -> None:
    system = render_prompt(make_request(gpu_facts=FACTS)).system
    for marker in ("NVIDIA H200 (sm_90)", "132 SMs", "60 MiB L2", "4,300 GB/s", "torch 2.13.0", "Triton 3.7.1",
                   "TF32 is pinned off", "input 0: float32[64, 64]; input 1: 3", "20.0 µs per call",
                   "speed-of-light floor is 5.0 µs", "reaches 25% of it", "83% 15.0 µs `sm90_xmma_gemm`",
                   "(2 launches)"):  # fmt: skip
        assert marker in system, marker


def test_the_best_kernels_profile_and_ncu_summary_only_for_the_base_they_describe() -> None:
    digest = hashlib.sha256(KERNEL.encode()).hexdigest()
    ncu = NcuSummary(kernel="fused_k", duration_us=12.5, sm_throughput_pct=20.0, dram_throughput_pct=81.0,
                     achieved_occupancy_pct=45.0, registers_per_thread=32, grid_size=1024, block_size=128)  # fmt: skip
    facts = FACTS.model_copy(
        update={
            "best_sha256": digest,
            "best_kernels": [KernelTime(name="fused_k", time_us=12.0, share=1.0)],
            "ncu": ncu,
        }
    )
    user = render_prompt(make_request(gpu_facts=facts)).user
    assert "Where the current best's time goes" in user and "100% 12.0 µs `fused_k`" in user
    assert "Nsight Compute, one launch of `fused_k`: 12.5 µs; compute (SM) throughput 20% of peak" in user
    assert "DRAM throughput 81% of peak; achieved occupancy 45%" in user and "32 registers/thread" in user
    assert best_section(make_request(gpu_facts=facts, base_source="other\n")) == ""  # facts of another kernel


def test_without_ncu_the_profile_is_shown_and_nothing_else_is_said() -> None:
    digest = hashlib.sha256(KERNEL.encode()).hexdigest()
    facts = FACTS.model_copy(
        update={
            "best_sha256": digest,
            "best_kernels": [KernelTime(name="k", time_us=1.0, share=1.0)],
            "ncu": None,
            "ncu_note": "ncu (Nsight Compute) is not on PATH",
        }  # fmt: skip
    )
    text = best_section(make_request(gpu_facts=facts))
    assert "`k`" in text and "Nsight" not in text and "PATH" not in text


def test_cpu_runs_say_what_the_interpreter_is() -> None:
    cpu = GpuFacts(device="cpu", gpu_arch="cpu", torch_version="2.13.0", triton_version="3.7.1",
                   triton_interpreted=True, shape_variant="smoke {N=8}", inputs=[InputSpec(shape=[8, 8], dtype="float32")])  # fmt: skip
    system = render_prompt(make_request(device="cpu", language=Language.TRITON, gpu_facts=cpu)).system
    assert "interpreter (TRITON_INTERPRET=1)" in system and "correctness only" in system
    assert "timings here mean nothing" in system and "`@triton.autotune` runs only its first config" in system
    assert "smoke {N=8}): input 0: float32[8, 8]" in system and "H200" not in system
    cuda_on_cpu = device_section(make_request(device="cpu", language=Language.CUDA, gpu_facts=None))
    assert "CUDA C++ extensions cannot be built or run here" in cuda_on_cpu


def test_a_gpu_run_without_facts_says_so_in_one_line() -> None:
    text = device_section(make_request(gpu_facts=None))
    assert text == "The kernel runs on a CUDA GPU (its details could not be measured for this run)."
