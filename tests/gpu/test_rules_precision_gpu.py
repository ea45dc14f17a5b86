"""TF32 recipes and loop autotuning on CUDA at the tasks' DEFAULT sizes (marker gpu).

    pytest -m gpu tests/gpu/test_rules_precision_gpu.py -s     # -s prints the RULES_TF32 / RULES_AUTOTUNE lines

TF32: each dev task the TF32 recipes apply to goes through the real SubprocessEvaluator twice: the TF32 kernel
under the tf32 policy (checked at that policy's tolerance, labelled tf32) and the fp32 library-epilogue kernel
under fp32-strict. `RULES_TF32 task recipe eager_us fp32_kernel_us tf32_kernel_us max_rel_err` is information
(harness medians), not an assertion; correctness, labels and the restored switch are asserted.
Autotune: the loop runs 3 tuning steps on a level1 task with a file cache; the cache must hold exactly the
evaluator's GPU runtimes under the GPU's name.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.model import (
    EvalRequest,
    EvalResult,
    GenerationRequest,
    GlobalDirection,
    Language,
    LocalStrategy,
    PrecisionPolicy,
    Task,
)
from htam_graph.rules import RulesGenerator, parse_header
from tests.gpu.rules_gpu_support import GPU_MARKS, KB
from tests.gpu.rules_gpu_support import make_task as make_kernelbench_task

MATMUL, CONV = "precision.tf32_matmul", "precision.tf32_convolution"
CASES = [
    ("level2/12_Gemm_Multiply_LeakyReLU.py", MATMUL),
    ("level2/68_Matmul_Min_Subtract.py", MATMUL),
    ("level2/70_Gemm_Sigmoid_Scaling_ResidualAdd.py", MATMUL),
    ("level2/76_Gemm_Add_ReLU.py", MATMUL),
    ("level2/86_Matmul_Divide_GELU.py", MATMUL),
    ("level2/2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide.py", CONV),
    ("level2/4_Conv2d_Mish_Mish.py", CONV),
    ("level2/16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling.py", CONV),
    ("level2/26_ConvTranspose3d_Add_HardSwish.py", CONV),
    ("level2/48_Conv3d_Scaling_Tanh_Multiply_Sigmoid.py", CONV),
    ("level2/54_Conv2d_Multiply_LeakyReLU_GELU.py", CONV),
    ("level2/90_Conv3d_LeakyReLU_Sum_Clamp_GELU.py", CONV),
    ("level2/100_ConvTranspose3d_Clamp_Min_Divide.py", CONV),
]

pytestmark = GPU_MARKS


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory: pytest.TempPathFactory) -> SubprocessEvaluator:
    return SubprocessEvaluator(cache_dir=tmp_path_factory.mktemp("runtime"))


@pytest.fixture(autouse=True)
def _restore_switches() -> Iterator[None]:
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def make_task(rel: str) -> Task:
    return make_kernelbench_task(rel, suite="kb")


def generate(task: Task, key: str, policy: PrecisionPolicy) -> str:
    g = key.split(".")[0]
    reply = RulesGenerator().generate(
        GenerationRequest(
            task=task,
            step=1,
            direction=GlobalDirection(key=g, name=g, intent=""),
            strategy=LocalStrategy(key=key, name=key, global_key=g, languages=[Language.TRITON], pattern=""),
            base_source="",
            language=Language.TRITON,
            state_summary="",
            device="cuda",
            precision_policy=policy,
        )
    )
    assert reply.source is not None, reply.error
    return reply.source


def evaluate(ev: SubprocessEvaluator, task: Task, source: str, policy: PrecisionPolicy) -> EvalResult:
    return ev.evaluate(
        EvalRequest(
            task_key=task.key,
            task_source=task.source,
            candidate_source=source,
            device="cuda",
            shape="default",
            precision_policy=policy,
            measure_baselines=False,
            timeout_s=600,
        )
    )


@pytest.mark.parametrize(("rel", "key"), CASES)
def test_tf32_kernel_is_correct_at_its_tolerance_and_labelled(
    evaluator: SubprocessEvaluator, rel: str, key: str
) -> None:
    task = make_task(rel)
    tf32 = evaluate(evaluator, task, generate(task, key, PrecisionPolicy.TF32), PrecisionPolicy.TF32)
    assert tf32.correct, tf32.error_excerpt
    assert tf32.precision_policy is PrecisionPolicy.TF32 and (tf32.rtol, tf32.atol) == (1e-2, 1e-2)
    fp32 = evaluate(
        evaluator,
        task,
        generate(task, "fusion.library_epilogue", PrecisionPolicy.FP32_STRICT),
        PrecisionPolicy.FP32_STRICT,
    )
    assert fp32.correct, fp32.error_excerpt
    assert fp32.precision_policy is PrecisionPolicy.FP32_STRICT and fp32.rtol == 1e-4
    print(
        f"RULES_TF32 {rel} {key} gpu={tf32.gpu_name!r} torch={tf32.torch_version} "
        f"eager_us={tf32.ref_eager_us:.1f} fp32_kernel_us={fp32.runtime_us:.1f} tf32_kernel_us={tf32.runtime_us:.1f} "
        f"tf32_over_eager={tf32.speedup_eager_x:.3f}x fp32_over_eager={fp32.speedup_eager_x:.3f}x "
        f"max_rel_err={tf32.max_rel_err}"
    )


def test_the_scope_really_switches_tf32_and_restores_it(tmp_path: Path) -> None:
    """In-process: inside the scope a large GEMM differs from the fp32 one (TF32 in effect); after it, the
    switch is back to off and the GEMM is bit-identical to the fp32 result again."""
    source = generate(make_task("level2/76_Gemm_Add_ReLU.py"), MATMUL, PrecisionPolicy.TF32)
    start, end = source.index("class Tf32MatmulScope:"), source.index("\n\n\nclass ModelNew(")
    namespace: dict[str, object] = {"torch": torch}
    exec(source[start:end], namespace)  # noqa: S102 - our own generated code, in a test
    scope = namespace["Tf32MatmulScope"]
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(2048, 4096, device="cuda")
    b = torch.randn(4096, 2048, device="cuda")
    exact = a @ b
    with scope():  # type: ignore[operator]
        fast = a @ b
    after = a @ b
    torch.cuda.synchronize()
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert not torch.equal(fast, exact) and torch.equal(after, exact)
    print(f"RULES_TF32 scope max_rel_err={((fast - exact).abs().max() / exact.abs().max()).item():.2e}")


def test_loop_autotune_records_the_gpu_runtimes(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from htam_graph import memory
    from htam_graph.importers.kernelbench import parse_task
    from htam_graph.loop import OptimizationLoop, RunConfig
    from htam_graph.rules.autotune import AutotuneCache, Autotuner, TuneKey, space_for
    from htam_graph.seed import load_seed
    from htam_graph.settings import PolicySettings

    memory.seed_memory(store, load_seed())
    task = parse_task(KB / "level1" / "20_LeakyReLU.py", KB)
    assert isinstance(task, Task)
    name = torch.cuda.get_device_name(0)
    generator = RulesGenerator(autotuner=Autotuner(AutotuneCache(tmp_path), device_name=name))
    loop = OptimizationLoop(
        store,
        SubprocessEvaluator(cache_dir=tmp_path / "runtime"),
        generator,
        PolicySettings(),
        RunConfig(device="cuda", shape="default", steps=3),
        executable_locals=lambda t: ["parallelism.block_size_tuning"],
    )
    result = loop.run(task)
    measured = {}
    for s in result.steps:
        assert s.result is not None and s.result.correct, s.error_excerpt
        header = parse_header(s.source or "")
        assert header is not None
        measured[header.config] = s.result.runtime_us
        print(f"RULES_AUTOTUNE {task.key} {header.config} runtime_us={s.result.runtime_us:.1f} on {name}")
    key = TuneKey(task.key, "default", name, "fusion.elementwise_chain")
    got = AutotuneCache(tmp_path).measurements(key, space_for("fusion.elementwise_chain"))
    assert {c: m.runtime_us for c, m in got.items()} == measured
