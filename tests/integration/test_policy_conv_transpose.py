"""The HTAM policy on a transposed-conv task with the packaged seed, on the real embedded graph.

On level1/78 (and 68, 70) the rules can act on two directions only: `library_offload` (channels_last_conv) and
`algebraic_rewrite` (conv_transpose_as_conv). The seed gives both the same standing (prior edges both ways, no
self-transition), so the policy must not drift towards either one; in particular, repeating a direction whose
attempt earned nothing must become less likely, not more (it did: a null CPU attempt gave the never-seeded
self-transition library_offload -> library_offload the seed's prior gain, 0 -> 0.0375, see
/work/notes/policy_library_offload.md).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from htam_graph import memory, policy
from htam_graph.loop import OptimizationLoop, RunConfig
from htam_graph.model import AttemptRecord, EvalRequest, EvalResult, Task
from htam_graph.rules import RulesGenerator
from htam_graph.seed import load_seed
from htam_graph.settings import PolicySettings

LO, AR = "library_offload", "algebraic_rewrite"
ACTIONABLE = {LO, AR}  # the directions with an executable recipe on a plain ConvTranspose task


def p_actionable(store: Any, history: list[str], arch: str) -> dict[str, float]:
    """The policy's probabilities renormalised over the actionable directions, as the loop samples them."""
    scored = memory.score_directions(
        store, history, gpu_arch=arch, settings=PolicySettings(), mode=policy.PolicyMode.HTG
    )
    pool = {d.key: d.probability for d in scored if d.key in ACTIONABLE}
    total = sum(pool.values())
    return {k: v / total for k, v in pool.items()}


def null_attempt(key: str, prev: str, dst: str) -> AttemptRecord:
    """A correct candidate that was not faster on the GPU: gain 0. (A CPU attempt is no evidence at all.)"""
    return AttemptRecord(
        key=key,
        run_key="r",
        task_key="level1/78",
        step=2,
        global_key=dst,
        prev_global_key=prev,
        status="correct",
        compiled=True,
        correct=True,
        gain=0.0,
        gpu_arch="sm_90",
        created_ms=1,
    )


def test_seed_alone_favours_switching_direction(store: Any) -> None:
    memory.seed_memory(store, load_seed())
    after_lo = p_actionable(store, [LO], "cpu")
    after_ar = p_actionable(store, [AR], "cpu")
    # seeded LO->AR scores prior_gain 0.05, the unseeded LO->LO 0: softmax at T=0.05 with bonus 0.02 for both
    assert after_lo[AR] == pytest.approx(math.e / (1 + math.e))  # 0.731
    # symmetric: the seed has no built-in preference for library_offload
    assert after_ar[LO] == pytest.approx(after_lo[AR])


def test_a_null_attempt_makes_repeating_the_direction_less_likely(store: Any) -> None:
    memory.seed_memory(store, load_seed())
    before = p_actionable(store, [LO], "sm_90")[LO]  # step 2 after library_offload, nothing recorded yet
    memory.record_attempts(store, [null_attempt("s2", LO, LO)])  # step 2 repeated it and earned nothing
    after = p_actionable(store, [LO, LO], "sm_90")[LO]  # step 3
    assert before == pytest.approx(0.269, abs=1e-3)
    assert after < before  # was 0.397 when the unseeded LO->LO was shrunk towards the seed's prior gain


KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
LEVEL1_78 = "level1/78_conv_transposed_2D_asymmetric_input_asymmetric_kernel___padded__.py"


class CpuEvaluator:
    """Every candidate correct, timed on the CPU (so gain 0, as in a `--device cpu` run)."""

    def evaluate(self, request: EvalRequest) -> EvalResult:
        return EvalResult(
            compiled=True,
            correct=True,
            runtime_us=1000.0,
            ref_eager_us=1000.0,
            speedup_eager_x=1.0,
            device="cpu",
            timing_on_cpu=True,
            gpu_arch="cpu",
        )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_loop_records_the_chance_the_draw_had(store: Any, seed: int) -> None:
    """Step 1 on a fresh memory: both actionable directions score prior_gain, so the draw is a coin toss and the
    trajectory must say 0.5 (it said 0.1, the chosen direction's share of all ten globals)."""
    from htam_graph.importers.kernelbench import parse_task

    memory.seed_memory(store, load_seed())
    task = parse_task(KB / LEVEL1_78, KB)
    assert isinstance(task, Task)
    rules = RulesGenerator()
    assert {k.split(".")[0] for k in rules.recipes_for(task)} == ACTIONABLE
    cfg = RunConfig(steps=1, device="cpu", shape="smoke", seed=seed)
    loop = OptimizationLoop(
        store, CpuEvaluator(), rules, PolicySettings(), cfg, executable_locals=rules.recipes_for
    )
    (step,) = loop.run(task).steps
    assert step.global_key in ACTIONABLE
    assert step.direction_probability == pytest.approx(0.5)
