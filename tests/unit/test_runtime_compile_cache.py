"""compile_many: statically rejected and non-CUDA sources are never executed; no CUDA build happens on the CPU."""

from __future__ import annotations

from pathlib import Path

from htam_graph.kernels_runtime.parent.compile_cache import compile_many
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.kernels_runtime.paths import extension_dir, source_digest

DATA = Path(__file__).resolve().parents[1] / "data"


class _NoWorker(SubprocessEvaluator):
    """Fails the test if a worker would be spawned."""

    def compile_outcomes(self, requests):  # type: ignore[no-untyped-def]
        raise AssertionError("no worker should be spawned for these sources")


def test_non_cuda_and_rejected_sources_are_not_executed(tmp_path: Path) -> None:
    triton = (DATA / "candidates" / "triton_tanh.py").read_text()
    hack = (DATA / "adversarial" / "spawns_thread.py").read_text()
    out = compile_many([triton, hack, "def f(:"], evaluator=_NoWorker(cache_dir=tmp_path), jobs=2)
    assert [o.built for o in out] == [False, False, False]
    assert (
        "nothing to pre-build" in out[0].skipped and "static" in out[1].skipped and "static" in out[2].skipped
    )
    assert out[0].digest == source_digest(triton)


def test_extension_dirs_are_keyed_by_source(tmp_path: Path) -> None:
    assert extension_dir(tmp_path, "a") != extension_dir(tmp_path, "b")
    assert extension_dir(tmp_path, "a") == extension_dir(tmp_path, "a")
