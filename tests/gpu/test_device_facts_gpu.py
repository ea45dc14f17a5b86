"""Device facts on a real GPU (marker gpu; run on the GPU machine: pytest -m gpu tests/gpu/test_device_facts_gpu.py).

What the prompts are told about the GPU and the task's reference there, measured by the worker, and the best
kernel's profile with an `ncu` summary where Nsight Compute runs (a note saying why not elsewhere). The rendered
system and step texts are checked for the facts too.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator  # noqa: E402
from htam_graph.llm.prompts import render_prompt  # noqa: E402
from htam_graph.model import EvalRequest, GenerationRequest, GlobalDirection, Language, Task  # noqa: E402

pytestmark = pytest.mark.gpu
DATA = Path(__file__).resolve().parents[1] / "data"
TASK = (DATA / "kernelbench" / "level1" / "20_LeakyReLU.py").read_text()
KERNEL = "\n".join(
    line
    for line in (DATA / "candidates" / "triton_leaky_relu.py").read_text().splitlines()
    if not line.startswith("#")
)


@pytest.fixture(scope="module")
def ev(tmp_path_factory: pytest.TempPathFactory) -> SubprocessEvaluator:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return SubprocessEvaluator(cache_dir=tmp_path_factory.mktemp("cache"))


def _request(candidate: str, kind: str) -> EvalRequest:
    return EvalRequest(task_key="level1/20_LeakyReLU", task_source=TASK, candidate_source=candidate,
                       device="cuda", candidate_kind=kind)  # type: ignore[arg-type]  # fmt: skip


def test_reference_facts_name_the_gpu_and_where_the_time_goes(ev: SubprocessEvaluator) -> None:
    facts = ev.device_facts(_request("", "reference"))
    assert facts is not None and facts.device == "cuda"
    assert facts.gpu_name and facts.gpu_arch.startswith("sm_") and facts.sm_count and facts.sm_count > 0
    assert facts.l2_bytes and facts.memory_bytes and facts.torch_version and facts.triton_version
    assert facts.tf32_off is True
    assert facts.inputs and facts.inputs[0].shape and facts.inputs[0].dtype == "float32"
    assert facts.ref_eager_us and facts.ref_eager_us > 0
    assert facts.eager_kernels and 0.99 <= sum(k.share for k in facts.eager_kernels) <= 1.01
    if "H200" in facts.gpu_name or "H100" in facts.gpu_name:
        assert facts.bandwidth_gbs and facts.sol_us and 0 < facts.sol_us <= facts.ref_eager_us
    assert facts.best_kernels == [] and facts.ncu is None  # the reference is not profiled as a "best"


def test_the_best_kernel_is_profiled_and_summarised_by_ncu_where_it_runs(ev: SubprocessEvaluator) -> None:
    facts = ev.device_facts(_request(KERNEL, "kernel"))
    assert facts is not None and facts.best_sha256 == hashlib.sha256(KERNEL.encode()).hexdigest()
    assert facts.best_kernels and "leaky_relu_kernel" in facts.best_kernels[0].name
    if shutil.which("ncu") is None:
        assert facts.ncu is None and "not on PATH" in facts.ncu_note
    elif facts.ncu is None:  # installed but unusable here (e.g. no permission): said, never raised
        assert facts.ncu_note
    else:
        assert facts.ncu.kernel and facts.ncu.duration_us and facts.ncu.duration_us > 0
    task = Task(key="level1/20_LeakyReLU", suite="kernelbench", level=1, name="20_LeakyReLU", source=TASK,
                source_sha256="0" * 64, op_tags=["activation", "elementwise"])  # fmt: skip
    request = GenerationRequest(task=task, step=2, direction=GlobalDirection(key="g", name="g", intent="i"),
                                strategy=None, base_source=KERNEL, language=Language.TRITON, state_summary="",
                                device="cuda", gpu_facts=facts)  # fmt: skip
    prompt = render_prompt(request)
    assert facts.gpu_name in prompt.system and facts.gpu_arch in prompt.system and "SMs" in prompt.system
    assert "Where the reference's time goes" in prompt.system
    assert "Where the current best's time goes" in prompt.user
    if facts.ncu is not None:
        assert "Nsight Compute, one launch of" in prompt.user
