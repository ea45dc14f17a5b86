"""The GPU self-check must actually select the corpus files meant for the GPU (it once selected none)."""

from __future__ import annotations

from pathlib import Path

from htam_graph.kernels_runtime.parent import selfcheck
from htam_graph.kernels_runtime.parent.corpus import load_corpus
from htam_graph.model import ErrorKind, EvalRequest, EvalResult

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT / "tests" / "data" / "kernelbench"
CORPUS = ROOT / "tests" / "data" / "adversarial"


class _RejectAll:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def evaluate(self, request: EvalRequest) -> EvalResult:
        self.seen.append(request.task_key)
        return EvalResult(compiled=True, correct=False, error_kind=ErrorKind.MISMATCH, device=request.device)


def test_the_cuda_section_runs_every_gpu_corpus_file() -> None:
    gpu_entries = [e for e in load_corpus(CORPUS) if "gpu" in e.runs_on]
    assert len(gpu_entries) >= 15
    ev = _RejectAll()
    rows = selfcheck.adversarial(ev, KB, CORPUS, device="cuda")  # type: ignore[arg-type]
    assert len(rows) == len(gpu_entries) == len(ev.seen)
