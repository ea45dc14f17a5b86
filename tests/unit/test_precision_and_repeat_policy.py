"""What the prompt and the seed memory tell a model agrees with what the runtime enforces, on two points the H200
LLM study found disagreeing (results/llm_study/README.md):

- the tl.dot precisions fp32-strict accepts: the static check accepts `ieee` and the error-compensated `tf32x3`
  (3xTF32), so the system prompt names both, and the plain TF32 default stays rejected;
- repeatability: the harness runs a candidate twice on the same inputs and rejects any difference
  (`output_checks.deterministic_rerun`), so the system prompt says so, and no seed strategy offers float atomics
  as a way to combine partial results without saying that they fail that check.
"""

from __future__ import annotations

import re

from htam_graph.kernels_runtime.static_checks import analyse
from htam_graph.llm.prompts import render_prompt
from htam_graph.model import (
    GenerationRequest,
    GlobalDirection,
    Language,
    LocalWithEvidence,
    PrecisionPolicy,
    Task,
)
from htam_graph.seed import load_seed
from htam_graph.state import memory_context

GEMM = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])
    b = tl.load(b_ptr + r[:, None] * BLOCK + r[None, :])
    tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], tl.dot(a, b{precision}))


class ModelNew(nn.Module):
    def forward(self, a, b):
        c = torch.empty_like(a)
        mm[(1,)](a, b, c, BLOCK=16)
        return c
"""


def _system() -> str:
    task = Task(key="t", suite="s", level=1, name="t", source="class Model: pass\n", source_sha256="0" * 64)
    request = GenerationRequest(
        task=task, step=1, direction=GlobalDirection(key="fusion", name="f", intent="i"), strategy=None,
        base_source="", language=Language.TRITON, state_summary="", precision_policy=PrecisionPolicy.FP32_STRICT,
    )  # fmt: skip
    return " ".join(render_prompt(request).system.split())


def _dot_violations(precision: str) -> list[str]:
    source = GEMM.format(precision=precision)
    return analyse(source, PrecisionPolicy.FP32_STRICT, require_kernel=True).violations


def test_the_prompt_names_exactly_the_dot_precisions_fp32_strict_accepts() -> None:
    system = _system()
    for precision in ("ieee", "tf32x3"):
        assert _dot_violations(f', input_precision="{precision}"') == []
        assert f'"{precision}"' in system
    assert any("tl.dot" in v for v in _dot_violations(""))  # the TF32 default is rejected
    assert any("tl.dot" in v for v in _dot_violations(', input_precision="tf32"'))
    assert 'a plain `"tf32"` dot is rejected, also on operands split by hand' in system


def test_the_prompt_states_the_repeat_check_the_harness_applies() -> None:
    system = _system()
    assert "bit-identical outputs on every call" in system
    assert "not with float atomics" in system


def test_no_seed_strategy_offers_float_atomics_without_saying_they_fail() -> None:
    seed = load_seed()
    texts = [(loc.key, " ".join([loc.pattern, *loc.risks, *loc.checks])) for loc in seed.locals]
    texts += [(f"{t.src}->{t.dst}", " ".join([t.rationale, *t.risks])) for t in seed.transitions]
    texts += [(g.key, " ".join([g.intent, *g.goals, *g.risks])) for g in seed.globals]
    offering = [(key, " ".join(text.split())) for key, text in texts if re.search(r"atomic", text, re.I)]
    assert offering, "the seed mentions atomics somewhere: the check below must have something to check"
    for key, text in offering:
        assert re.search(r"repeat check|identical outputs|are out", text), key
        assert "when determinism is not required" not in text, key


def test_the_seed_says_to_write_3xtf32_as_tf32x3_not_as_a_hand_split() -> None:
    """The study's stand-in read the 3xTF32 strategy's description of the split as a recipe and summed hi/lo
    parts with plain TF32 dots, which the static check rejects: the text points at `tf32x3` instead."""
    pattern = " ".join(_emulation().strategy.pattern.split())
    assert 'input_precision="tf32x3"' in pattern
    assert "never with a hand-made hi/lo split" in pattern


def test_a_strategy_shown_in_one_sentence_keeps_its_warning() -> None:
    """A strategy offered beside the chosen one is shown by its first sentence only. In the prompt-v2 arm two
    stand-ins took the 3xTF32 strategy from that one sentence, which described the hand split, and wrote it:
    the sentence itself now names `tf32x3` and forbids the split, also a split made once per call."""
    chosen = LocalWithEvidence(strategy=load_seed().locals[0])
    text = memory_context(chosen, [], alternatives=[_emulation()], gpu_arch="sm_90")
    [line] = [
        ln for ln in text.splitlines() if ln.startswith("- `compute_efficiency.tensor_core_fp32_emulation`")
    ]
    assert 'input_precision="tf32x3"' in line
    assert "never with a hand-made hi/lo split" in line
    assert "also when the operands were split once per call" in line


def _emulation() -> LocalWithEvidence:
    [loc] = [loc for loc in load_seed().locals if loc.key == "compute_efficiency.tensor_core_fp32_emulation"]
    return LocalWithEvidence(strategy=loc)
