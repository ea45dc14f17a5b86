"""The runtime on a real GPU (marker gpu; run on the GPU machine: pytest -m gpu tests/gpu/test_runtime_gpu.py).

Default shapes (the real KernelBench sizes). The larger report with timings and baselines is
scripts/gpu_runtime_check.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from htam_graph.kernels_runtime.parent import selfcheck  # noqa: E402
from htam_graph.kernels_runtime.parent.corpus import load_corpus  # noqa: E402
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator  # noqa: E402
from htam_graph.kernels_runtime.worker import guards  # noqa: E402
from htam_graph.kernels_runtime.worker.execution import CandidateFailure  # noqa: E402
from htam_graph.kernels_runtime.worker.trials import TrialContext, call_candidate  # noqa: E402
from htam_graph.model import PrecisionPolicy  # noqa: E402

pytestmark = pytest.mark.gpu
DATA = Path(__file__).resolve().parents[1] / "data"
KB = Path(
    os.environ.get("HTAM_KERNELBENCH", str(Path(__file__).resolve().parents[1] / "data" / "kernelbench"))
)


@pytest.fixture(scope="module")
def ev(tmp_path_factory: pytest.TempPathFactory) -> SubprocessEvaluator:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return SubprocessEvaluator(cache_dir=tmp_path_factory.mktemp("cache"))


def test_reference_as_candidate_speedup_is_about_one(ev: SubprocessEvaluator) -> None:
    rows = selfcheck.reference_sample(
        ev,
        KB,
        [
            "level1/22_Tanh.py",
            "level1/2_Standard_matrix_multiplication_.py",
            "level2/12_Gemm_Multiply_LeakyReLU.py",
        ],
    )
    for r in rows:
        assert r["correct"], r
        assert 0.8 < r["speedup_eager_x"] < 1.25, r  # same code timed the same way: only noise


def test_good_candidates_pass_and_are_timed(ev: SubprocessEvaluator) -> None:
    rows = [r for r in selfcheck.good_candidates(ev, KB, DATA / "candidates") if "pre-build" not in r["name"]]
    for r in rows:
        assert r["correct"], r
        assert r["runtime_us"] and r["ref_eager_us"] and r["sol_us"] and not r["sol_flagged"], r


@pytest.fixture(scope="module")
def adversarial_rows(ev: SubprocessEvaluator) -> dict[str, dict]:
    return {r["name"]: r for r in selfcheck.adversarial(ev, KB, DATA / "adversarial")}


@pytest.mark.parametrize("entry", load_corpus(DATA / "adversarial"), ids=lambda e: e.name)
def test_adversarial_rejected_on_gpu(adversarial_rows: dict[str, dict], entry) -> None:
    row = adversarial_rows[entry.name]
    assert row["ok"], row


def test_side_stream_output_is_read_in_stream_order() -> None:
    """Runtime backup of the static side-stream rule: a kernel left running on another stream is still awaited by
    the device-wide synchronize inside call_candidate, so the value compared is the finished one, never a race won
    by the candidate; here we check the harness call itself returns only after the side-stream work is done."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    side = torch.cuda.Stream()

    class SideStream(torch.nn.Module):
        def forward(self, x):
            out = torch.empty_like(x)
            with torch.cuda.stream(side):
                torch.cuda._sleep(50_000_000)
                out.copy_(x * 2)
            return out

    ctx = TrialContext(
        torch.device("cuda"),
        PrecisionPolicy.FP32_STRICT,
        1e-4,
        1e-4,
        False,
        guards.LaunchCounter(),
        guards.snapshot_identities(),
        "x.py",
    )
    guards.pin_precision(PrecisionPolicy.FP32_STRICT)
    x = torch.rand(1 << 20, device="cuda")
    out, _ = call_candidate(SideStream(), [x], 0, ctx)
    assert torch.equal(out, x * 2)
    assert side.query()


def test_tf32_flip_at_runtime_is_caught_on_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")

    class FlipsTF32(torch.nn.Module):
        def forward(self, x):
            torch.backends.cuda.matmul.allow_tf32 = True
            return x @ x

    ctx = TrialContext(
        torch.device("cuda"),
        PrecisionPolicy.FP32_STRICT,
        1e-4,
        1e-4,
        False,
        guards.LaunchCounter(),
        guards.snapshot_identities(),
        "x.py",
    )
    guards.pin_precision(PrecisionPolicy.FP32_STRICT)
    try:
        with pytest.raises(CandidateFailure) as info:
            call_candidate(FlipsTF32(), [torch.rand(64, 64, device="cuda")], 0, ctx)
        assert info.value.check == "tf32_pinned_off"
    finally:
        guards.pin_precision(PrecisionPolicy.FP32_STRICT)
