"""The tiny-output check through the real SubprocessEvaluator (CPU, TRITON_INTERPRET=1).

On a row softmax over 20000 columns every output is ~3e-5 to ~8e-5: at atol 1e-4 a zeros, constant or uniform
output passes, and so does one that repeats its first answer. The evaluator compares at atol scaled to the
output there (kernels_runtime/worker/tinyout.py): those fail it, an honest Triton softmax passes and its win counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.kernels_runtime.parent.reference import reference_as_candidate
from htam_graph.model import ErrorKind, EvalRequest, EvalResult

DATA = Path(__file__).resolve().parents[1] / "data" / "tiny_output"
TASK = (DATA / "row_softmax_wide.py").read_text(encoding="utf-8")
PREFIX = (DATA / "softmax_candidates.py").read_text(encoding="utf-8")

FORWARDS = {
    "honest": "        return softmax(x)\n",
    "zeros": "        return filled(x, 0.0)\n",
    "constant": "        return filled(x, 3.0e-5)\n",
    "uniform": "        return filled(x, 1.0 / x.shape[1])\n",
    # right on the first call at each shape, then that first answer again (copied by a kernel into new storage)
    "stale": (
        "        key = tuple(x.shape)\n"
        "        if key not in self.first:\n"
        "            self.first[key] = softmax(x)\n"
        "        cached = self.first[key]\n"
        "        out = torch.empty_like(cached)\n"
        "        copy[(triton.cdiv(out.numel(), 4096),)](cached, out, out.numel(), BLOCK=4096)\n"
        "        return out\n"
    ),
}


def _candidate(name: str) -> str:
    init = "    def __init__(self):\n        super().__init__()\n        self.first = {}\n\n"
    return PREFIX + "\n\nclass ModelNew(nn.Module):\n" + init + "    def forward(self, x):\n" + FORWARDS[name]


def _evaluate(evaluator: SubprocessEvaluator, source: str, **kw: object) -> EvalResult:
    base: dict[str, object] = dict(
        task_key="test/row_softmax_wide", task_source=TASK, candidate_source=source, device="cpu",
        shape="default", trials=2, extra_shapes=1, timing_runs=1, warmup_runs=0, measure_baselines=False,
        timeout_s=300,
    )  # fmt: skip
    base.update(kw)
    return evaluator.evaluate(EvalRequest(**base))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory: pytest.TempPathFactory) -> SubprocessEvaluator:
    return SubprocessEvaluator(cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def test_an_honest_softmax_passes_at_the_scaled_tolerance_and_its_win_counts(
    evaluator: SubprocessEvaluator,
) -> None:
    result = _evaluate(evaluator, _candidate("honest"))
    assert result.correct, (result.error_kind, result.error_excerpt, result.checks)
    assert not result.task_degenerate  # the scaled tolerance discriminates: a win here is counted
    assert result.checks["tiny_output_tolerance"].startswith("pass"), result.checks["tiny_output_tolerance"]
    assert result.checks["output_not_trivial"].startswith("pass")
    assert result.checks["extra_shapes"].startswith("pass")
    # atol 1e-4 x max|softmax| (~8e-5 at 20000 columns)
    assert result.scaled_atol is not None and 0 < result.scaled_atol < 1e-7, result.scaled_atol
    assert result.atol == 1e-4  # the request's tolerance stays recorded beside it


@pytest.mark.parametrize("name", ["zeros", "constant", "uniform", "stale"])
def test_trivial_and_stale_outputs_fail_the_scaled_tolerance(
    evaluator: SubprocessEvaluator, name: str
) -> None:
    result = _evaluate(evaluator, _candidate(name), extra_shapes=0)
    assert not result.correct
    assert result.error_kind is ErrorKind.MISMATCH, (result.error_kind, result.error_excerpt)
    assert "tiny-output tolerance" in result.error_excerpt
    assert result.checks["tiny_output_tolerance"].startswith("fail"), result.checks["tiny_output_tolerance"]
    assert result.scaled_atol is not None and result.scaled_atol < 1e-7


def test_the_reference_itself_still_passes_and_a_normal_task_keeps_the_request_tolerance(
    evaluator: SubprocessEvaluator,
) -> None:
    ref = _evaluate(evaluator, reference_as_candidate(TASK), candidate_kind="reference", extra_shapes=0)
    assert ref.correct and not ref.task_degenerate and ref.max_abs_err == 0.0, ref.checks
    assert ref.checks["tiny_output_tolerance"].startswith("pass")
    normal = TASK.replace("dim = 20000", "dim = 64")  # outputs ~1e-2: nothing to scale
    plain = _evaluate(
        evaluator,
        reference_as_candidate(normal),
        task_source=normal,
        candidate_kind="reference",
        extra_shapes=0,
    )
    assert plain.correct and plain.scaled_atol is None, plain.checks
    assert plain.checks["tiny_output_tolerance"].startswith("skipped: the reference output is not")
