"""What the loop offers an LLM, on the real embedded graph with the packaged seed: only applicable strategies,
ranked; never one direction three times in a row while another is allowed; the device facts passed through;
a CPU run adds no evidence."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from htam_graph import memory, policy
from htam_graph.devicefacts import GpuFacts
from htam_graph.importers.optags import op_tags
from htam_graph.loop import OptimizationLoop, RunConfig
from htam_graph.model import DirectionScore, EvalRequest, EvalResult, GenerationReply, GenerationRequest, Task
from htam_graph.seed import load_seed
from htam_graph.settings import PolicySettings

CONV_GN = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, c_in, c_out, k, groups, bias_shape, scale_shape):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.group_norm = nn.GroupNorm(groups, c_out)

    def forward(self, x):
        x = self.conv(x)
        x = x + self.bias
        x = x * self.scale
        x = torch.sigmoid(x)
        return self.group_norm(x)

def get_inputs():
    return [torch.rand(2, 3, 8, 8)]

def get_init_inputs():
    return [3, 8, 3, 4, (8, 1, 1), (8, 1, 1)]
"""
TASK = Task(
    key="study/conv_add_scale_sigmoid_groupnorm", suite="study", level=2, name="conv_gn", source=CONV_GN,
    source_sha256=hashlib.sha256(CONV_GN.encode()).hexdigest(), op_tags=op_tags(CONV_GN),
)  # fmt: skip
KERNEL = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    pass\n"


class Recorder:
    """An LLM stand-in: records each request and answers with a fresh kernel."""

    name = "recorder"

    def __init__(self) -> None:
        self.requests: list[GenerationRequest] = []

    def generate(self, request: GenerationRequest) -> GenerationReply:
        self.requests.append(request)
        return GenerationReply(source=KERNEL + f"# step {request.step}\n")


class Evaluator:
    """Every candidate correct, as timed on `arch` (or on the CPU), with facts about that device."""

    def __init__(self, arch: str = "sm_90") -> None:
        self.arch = arch
        self.facts_asked: list[EvalRequest] = []

    def evaluate(self, request: EvalRequest) -> EvalResult:
        cpu = self.arch == "cpu"
        speed = 1.0 + 0.1 * request.seed  # seeds grow with the step: every step improves
        return EvalResult(compiled=True, correct=True, runtime_us=100 / speed, ref_eager_us=100.0,
                          speedup_eager_x=speed, gpu_arch=self.arch, timing_on_cpu=cpu,
                          device="cpu" if cpu else "cuda", max_abs_err=1e-6)  # fmt: skip

    def device_facts(self, request: EvalRequest) -> GpuFacts | None:
        self.facts_asked.append(request)
        if self.arch == "cpu":
            return GpuFacts(device="cpu", gpu_arch="cpu", triton_interpreted=True)
        return GpuFacts(device="cuda", gpu_name="NVIDIA H200", gpu_arch=self.arch, sm_count=132)


@pytest.fixture
def seeded(store: Any) -> Any:
    memory.seed_memory(store, load_seed())
    return store


def _run(store: Any, evaluator: Evaluator, steps: int = 6, device: str = "cuda") -> tuple[Recorder, Any]:
    gen = Recorder()
    cfg = RunConfig(device=device, steps=steps, seed=3)  # type: ignore[arg-type]
    result = OptimizationLoop(store, evaluator, gen, PolicySettings(), cfg).run(TASK)
    return gen, result


def test_only_applicable_strategies_are_offered_most_relevant_first(seeded: Any) -> None:
    gen, result = _run(seeded, Evaluator(), steps=8)
    assert len(result.steps) == 8
    for req in gen.requests:
        offered = ([req.strategy] if req.strategy else []) + list(req.alternatives)
        assert offered, "every step offers a strategy: a direction without one is never drawn"
        for s in offered:
            assert policy.relevance(s, TASK.op_tags) is not None, s.key
            assert s.global_key != "precision" and s.key != "algebraic_rewrite.diag_matmul_as_broadcast"
        ranks = [policy.relevance(s, TASK.op_tags) or 0 for s in req.alternatives]
        assert ranks == sorted(ranks, reverse=True)  # alternatives: most relevant first
        assert "STRATEGY" not in req.memory_context and req.strategy is not None
        assert f"`{req.strategy.key}`" in req.memory_context  # described once, in the memory


def test_no_direction_comes_three_times_in_a_row(seeded: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even when the policy puts all its weight on one direction, the third step in a row goes elsewhere."""
    real = memory.score_directions

    def one_direction(*args: Any, **kwargs: Any) -> list[DirectionScore]:
        scores = real(*args, **kwargs)
        return [s.model_copy(update={"probability": 1.0 if s.key == "fusion" else 1e-12}) for s in scores]

    monkeypatch.setattr(memory, "score_directions", one_direction)
    _, result = _run(seeded, Evaluator(), steps=6)
    directions = [s.global_key for s in result.steps]
    assert directions[:2] == ["fusion", "fusion"] and directions[2] != "fusion"
    assert all(len(set(directions[i : i + 3])) > 1 for i in range(len(directions) - 2)), directions


def test_device_facts_reach_every_request_and_name_the_gpu(seeded: Any) -> None:
    evaluator = Evaluator()
    gen, result = _run(seeded, evaluator, steps=3)
    assert all(req.gpu_facts is not None and req.gpu_facts.gpu_name == "NVIDIA H200" for req in gen.requests)
    # asked once before step 1 (for the reference), then after each step that made a new best
    assert evaluator.facts_asked[0].candidate_kind == "reference"
    assert len(evaluator.facts_asked) == 1 + sum(s.status == "improved" for s in result.steps)
    assert all(r.candidate_kind == "kernel" for r in evaluator.facts_asked[1:])


def test_a_cpu_run_adopts_the_latest_correct_kernel_and_adds_no_evidence(seeded: Any) -> None:
    before = memory.memory_summary(seeded)
    evaluator = Evaluator("cpu")
    gen, result = _run(seeded, evaluator, steps=3, device="cpu")
    assert [s.status for s in result.steps] == ["correct"] * 3  # CPU timings never make an improvement
    assert result.best_step == 3 and gen.requests[2].base_source == result.steps[1].source
    assert len(evaluator.facts_asked) == 1  # on the CPU nothing is profiled again
    after = memory.memory_summary(seeded)
    assert after.labels["Attempt"] == 3 and after.top_transitions == before.top_transitions
    assert not seeded.run_text("MATCH ()-[e:STATS_ON|EVIDENCE_ON]->() RETURN e")
    totals = seeded.run_text("MATCH (l:Local) WHERE l.attempts > 0 RETURN l.key AS k")
    assert totals == []


class SaysNoneApplies(Recorder):
    def generate(self, request: GenerationRequest) -> GenerationReply:
        reply = super().generate(request)
        return reply.model_copy(update={"strategy_key": "none"})


def test_an_answer_that_no_strategy_applies_credits_no_strategy(seeded: Any) -> None:
    gen = SaysNoneApplies()
    cfg = RunConfig(device="cuda", steps=2, seed=3)
    result = OptimizationLoop(seeded, Evaluator(), gen, PolicySettings(), cfg).run(TASK)
    assert all(req.strategy is not None for req in gen.requests)  # a strategy was offered ...
    assert [s.local_key for s in result.steps] == [None, None]  # ... and none was credited
    assert not seeded.run_text("MATCH (:Attempt)-[:APPLIED]->(l:Local) RETURN l.key AS k")
