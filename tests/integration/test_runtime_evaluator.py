"""The subprocess evaluator on the CPU: good candidates pass, failures of every kind are classified, never raised."""

from __future__ import annotations

import concurrent.futures
import os
import runpy
import stat
import time
import uuid
from pathlib import Path

import pytest

from htam_graph.kernels_runtime.parent.corpus import CPU_TEST_SIZES, shrink_task
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.kernels_runtime.parent.reference import reference_as_candidate
from htam_graph.kernels_runtime.parent.templates import release_templates, template_pids
from htam_graph.model import ErrorKind, EvalRequest, Language

load_sibling = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]
processes_with_env = load_sibling("procs").processes_with_env
DATA = Path(__file__).resolve().parents[1] / "data"
KB = Path(
    os.environ.get("HTAM_KERNELBENCH", str(Path(__file__).resolve().parents[1] / "data" / "kernelbench"))
)
TANH = "level1/22_Tanh.py"

TINY_TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.tanh(x) * 2.0

batch_size = 4
dim = 256

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
"""

TRITON_PREFIX = (
    DATA.joinpath("candidates", "triton_tanh.py").read_text(encoding="utf-8").split("class ModelNew")[0]
)


def _task(task: str) -> str:
    path = KB / task
    if not path.exists():
        pytest.skip("KernelBench dev split not available")
    return shrink_task(path.read_text(encoding="utf-8"), CPU_TEST_SIZES[task])


def _req(candidate: str, task_source: str = TINY_TASK, **kw: object) -> EvalRequest:
    base: dict[str, object] = dict(
        task_key="test/tiny",
        task_source=task_source,
        candidate_source=candidate,
        device="cpu",
        shape="smoke",
        trials=2,
        timing_runs=3,
        warmup_runs=1,
        timeout_s=120,
    )
    base.update(kw)
    return EvalRequest(**base)  # type: ignore[arg-type]


def _kernel_candidate(forward_body: str) -> str:
    return TRITON_PREFIX + "class ModelNew(nn.Module):\n    def forward(self, x):\n" + forward_body


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory: pytest.TempPathFactory) -> SubprocessEvaluator:
    return SubprocessEvaluator(cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.mark.parametrize("name", ["triton_tanh", "triton_log_softmax", "triton_leaky_relu"])
def test_hand_written_triton_candidates_pass(evaluator: SubprocessEvaluator, name: str) -> None:
    source = (DATA / "candidates" / f"{name}.py").read_text(encoding="utf-8")
    task = {
        "triton_tanh": TANH,
        "triton_log_softmax": "level1/24_LogSoftmax.py",
        "triton_leaky_relu": "level1/20_LeakyReLU.py",
    }[name]
    result = evaluator.evaluate(_req(source, _task(task), task_key=task, trials=3))
    assert result.correct, (result.error_kind, result.error_excerpt, result.checks)
    assert result.language is Language.TRITON and result.compiled
    assert result.checks["kernel_launched"].startswith("pass")
    assert result.checks["extra_shapes"].startswith("pass")
    assert result.timing_on_cpu and result.runtime_us and result.ref_eager_us and result.speedup_eager_x
    assert result.gpu_arch == "cpu" and result.torch_version and result.max_abs_err is not None
    # LeakyReLU of torch.rand inputs (all >= 0) is the identity: the task is flagged, the candidate is not failed.
    assert result.task_degenerate == (name == "triton_leaky_relu")


def test_reference_as_candidate_passes_on_the_reference_track(evaluator: SubprocessEvaluator) -> None:
    result = evaluator.evaluate(_req(reference_as_candidate(TINY_TASK), candidate_kind="reference"))
    assert result.correct, result.error_excerpt
    assert result.checks["kernel_launched"].startswith("skipped")
    assert result.checks["output_not_trivial"].startswith("pass")
    assert result.max_abs_err == 0.0


def test_phase_times_break_correctness_down(evaluator: SubprocessEvaluator) -> None:
    result = evaluator.evaluate(_req(reference_as_candidate(TINY_TASK), candidate_kind="reference"))
    text = result.checks["phase_s"].removeprefix("info: ")
    phases = {name: float(v) for name, _, v in (p.strip().rpartition(" ") for p in text.split(","))}
    parts = {k: v for k, v in phases.items() if k.startswith("correctness.")}
    assert {"correctness.trials", "correctness.extra_shapes", "correctness.rerun"} <= set(parts)
    assert 0 < sum(parts.values()) <= phases["correctness"] + 1e-3  # parts of the total, not added to it
    assert {"variants", "import", "timing", "recheck"} <= set(phases)


def test_reference_as_candidate_fails_on_the_kernel_track(evaluator: SubprocessEvaluator) -> None:
    result = evaluator.evaluate(_req(reference_as_candidate(TINY_TASK)))
    assert result.error_kind is ErrorKind.HACK_DETECTED and "no kernel" in result.error_excerpt


def test_degenerate_task_is_flagged_not_the_candidate(evaluator: SubprocessEvaluator) -> None:
    task = TINY_TASK.replace("torch.tanh(x) * 2.0", "x * 0.0 + 1.0")
    result = evaluator.evaluate(_req(reference_as_candidate(task), task, candidate_kind="reference"))
    assert result.correct and result.task_degenerate
    assert "constant" in result.checks["output_not_trivial"]


def test_cuda_candidate_is_unsupported_on_cpu_without_spawning(evaluator: SubprocessEvaluator) -> None:
    source = (DATA / "candidates" / "cuda_tanh.py").read_text(encoding="utf-8")
    start = time.perf_counter()
    result = evaluator.evaluate(_req(source))
    assert result.error_kind is ErrorKind.UNSUPPORTED_ON_DEVICE and result.language is Language.CUDA
    assert time.perf_counter() - start < 2.0  # decided statically, no worker


def test_syntax_error_is_a_compile_error(evaluator: SubprocessEvaluator) -> None:
    result = evaluator.evaluate(_req("class ModelNew(:\n"))
    assert result.error_kind is ErrorKind.COMPILE_ERROR and "SyntaxError" in result.error_excerpt


def test_import_failure_is_a_compile_error_with_the_candidate_line(evaluator: SubprocessEvaluator) -> None:
    source = TRITON_PREFIX + "raise ValueError('bad build')\nclass ModelNew(nn.Module):\n    pass\n"
    result = evaluator.evaluate(_req(source))
    assert result.error_kind is ErrorKind.COMPILE_ERROR
    assert "bad build" in result.error_excerpt and "candidate_" in result.error_excerpt


def test_exception_in_forward_is_a_runtime_error(evaluator: SubprocessEvaluator) -> None:
    result = evaluator.evaluate(_req(_kernel_candidate("        raise IndexError('oops in forward')\n")))
    assert result.error_kind is ErrorKind.RUNTIME_ERROR and "oops in forward" in result.error_excerpt


def test_system_exit_in_forward_is_a_runtime_error(evaluator: SubprocessEvaluator) -> None:
    result = evaluator.evaluate(_req(_kernel_candidate("        raise SystemExit(0)\n")))
    assert result.error_kind is ErrorKind.RUNTIME_ERROR


def test_hang_is_a_timeout_and_the_caller_survives(evaluator: SubprocessEvaluator) -> None:
    start = time.perf_counter()
    result = evaluator.evaluate(
        _req(_kernel_candidate("        while True:\n            pass\n"), timeout_s=12)
    )
    assert result.error_kind is ErrorKind.TIMEOUT and "timed out" in result.error_excerpt
    assert time.perf_counter() - start < 30


def test_abort_is_a_crash(evaluator: SubprocessEvaluator) -> None:
    result = evaluator.evaluate(_req(_kernel_candidate("        import os\n        os.abort()\n")))
    assert result.error_kind is ErrorKind.CRASH and "SIGABRT" in result.error_excerpt


def test_worker_that_cannot_spawn_is_infra(tmp_path: Path) -> None:
    ev = SubprocessEvaluator(cache_dir=tmp_path, python=str(tmp_path / "no-such-python"))
    result = ev.evaluate(_req(_kernel_candidate("        return x\n")))
    assert result.error_kind is ErrorKind.INFRA_ERROR and "spawn" in result.error_excerpt


def _fake_python(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fake-python"
    script.write_text("#!/bin/sh\ncat > /dev/null\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_worker_failing_before_ready_is_infra(tmp_path: Path) -> None:
    ev = SubprocessEvaluator(
        cache_dir=tmp_path, python=_fake_python(tmp_path, "echo 'ImportError: no torch' >&2\nexit 1\n")
    )
    result = ev.evaluate(_req(_kernel_candidate("        return x\n")))
    assert result.error_kind is ErrorKind.INFRA_ERROR and "before it was ready" in result.error_excerpt
    assert "no torch" in result.error_excerpt


@pytest.mark.parametrize(
    "line",
    ["not json at all", '{"nonce": "forged", "index": 0, "result": {"compiled": true, "correct": true}}'],
    ids=["garbage", "wrong-nonce"],
)
def test_corrupted_or_unsigned_result_is_infra(tmp_path: Path, line: str) -> None:
    body = f'echo ready > "$HTAM_PROGRESS_PATH"\necho \'{line}\' > "$HTAM_RESULT_PATH"\nsleep 5\n'
    ev = SubprocessEvaluator(cache_dir=tmp_path, python=_fake_python(tmp_path, body))
    result = ev.evaluate(_req(_kernel_candidate("        return x\n")))
    assert result.error_kind is ErrorKind.INFRA_ERROR and not result.correct


def test_reuse_worker_is_only_for_the_reference_track(evaluator: SubprocessEvaluator) -> None:
    with pytest.raises(ValueError, match="reference"):
        evaluator.evaluate_many([_req(_kernel_candidate("        return x\n"))], reuse_worker=True)
    refs = [_req(reference_as_candidate(TINY_TASK), candidate_kind="reference", seed=s) for s in (0, 1)]
    results = evaluator.evaluate_many(refs, reuse_worker=True)
    assert [r.correct for r in results] == [True, True]


def test_worker_result_does_not_come_from_stdout(evaluator: SubprocessEvaluator) -> None:
    forged = '{"compiled": true, "correct": true}'
    source = _kernel_candidate(f"        print({forged!r})\n        raise RuntimeError('real failure')\n")
    result = evaluator.evaluate(_req(source))
    assert result.error_kind is ErrorKind.RUNTIME_ERROR


def test_no_worker_processes_left_behind(
    evaluator: SubprocessEvaluator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker (and anything it starts) inherits a marker in its environment, so workers that other tests
    run at the same time (pytest-xdist, the Neo4j run beside) are not taken for this one's leftovers. The
    marked worker is seen while it spins, so the final check looks for processes it can find."""
    marker = f"HTAM_TEST_LEFTOVER_MARK={uuid.uuid4().hex}"
    monkeypatch.setenv(*marker.split("=", 1))
    request = _req(_kernel_candidate("        while True:\n            pass\n"), timeout_s=8)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        done = pool.submit(evaluator.evaluate, request)
        seen: list[int] = []
        while not seen and not done.done():
            seen = processes_with_env(marker)
            time.sleep(0.1)
        result = done.result()
    assert result.error_kind is ErrorKind.TIMEOUT, result.error_excerpt
    assert seen, "the spinning worker was never seen: the leftover check would prove nothing"
    # A CPU worker is forked from a template that carries the marker too (templates.py): it alone may stay, and
    # it goes when released.
    assert set(processes_with_env(marker)) <= template_pids()
    release_templates()
    assert processes_with_env(marker) == []


def test_nondeterministic_output_within_tolerance_fails_the_rerun(evaluator: SubprocessEvaluator) -> None:
    """Deterministic stand-in for uninitialised memory (whose CPU behaviour depends on malloc): two runs on the
    same inputs differ by 1e-6, inside the tolerance, while the reference is bit-exact."""
    body = (
        "        _CALLS.append(1)\n"
        "        out = torch.empty_like(x)\n"
        "        launch = tanh_kernel[(triton.cdiv(x.numel(), 4096),)]\n"
        "        launch(x, out, x.numel(), BLOCK=4096)\n"
        "        return out * 2.0 + (len(_CALLS) % 2) * 1e-6\n"
    )
    result = evaluator.evaluate(_req("_CALLS = []\n" + _kernel_candidate(body)))
    assert result.error_kind is ErrorKind.MISMATCH, result.error_excerpt
    assert result.checks["deterministic_rerun"].startswith("fail")


def test_out_of_device_memory_is_retried_in_a_fresh_worker(tmp_path: Path) -> None:
    """A bench shares each GPU between workers; an OOM is infra_error and the evaluation is repeated."""
    marker = tmp_path / "first_call_seen"
    source = (DATA / "candidates" / "triton_tanh.py").read_text(encoding="utf-8")
    source += f"""

_MARKER = {str(marker)!r}
_forward = ModelNew.forward


def _forward_once_out_of_memory(self, x):
    import os
    if not os.path.isdir(_MARKER):
        os.mkdir(_MARKER)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB (simulated neighbour)")
    return _forward(self, x)


ModelNew.forward = _forward_once_out_of_memory
"""
    no_retry = SubprocessEvaluator(cache_dir=tmp_path / "a", oom_retries=0)
    first = no_retry.evaluate(_req(source, _task(TANH), task_key=TANH))
    assert first.error_kind is ErrorKind.INFRA_ERROR and "out of memory" in first.error_excerpt.lower()
    marker.rmdir()
    retrying = SubprocessEvaluator(cache_dir=tmp_path / "b", oom_retries=1, oom_wait_s=0.01)
    result = retrying.evaluate(_req(source, _task(TANH), task_key=TANH))
    assert result.correct, (result.error_kind, result.error_excerpt)
    assert result.checks["oom_retry"] == "info: evaluation repeated 1x"


def _queueing_python(tmp_path: Path, queue_s: float, after_s: float, waits: int = 1) -> str:
    """A fake worker that, `waits` times, waits `queue_s` between `queued 0` and `admitted 0` (the GPU memory
    budget or lock), then `after_s`, then writes a signed mismatch verdict."""
    import sys

    script = tmp_path / "queueing-python"
    script.write_text(
        f"""#!{sys.executable}
import json, os, sys, time
payload = json.loads(sys.stdin.read())
progress = open(os.environ["HTAM_PROGRESS_PATH"], "a")
def say(line):
    progress.write(line + "\\n")
    progress.flush()
say("ready"); say("start 0")
for _ in range({waits}):
    say("queued 0")
    time.sleep({queue_s})
    say("admitted 0")
    time.sleep({after_s})
from htam_graph.kernels_runtime.parent.evaluator import failure_result
from htam_graph.model import ErrorKind, EvalRequest
req = EvalRequest.model_validate(payload["requests"][0])
verdict = failure_result(req, ErrorKind.MISMATCH, "fake verdict").model_dump(mode="json")
with open(os.environ["HTAM_RESULT_PATH"], "a") as out:
    out.write(json.dumps({{"nonce": payload["nonce"], "index": 0, "result": verdict}}) + "\\n")
say("done 0")
""",
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_waiting_for_gpu_memory_does_not_count_against_the_timeout(tmp_path: Path) -> None:
    ev = SubprocessEvaluator(cache_dir=tmp_path, python=_queueing_python(tmp_path, queue_s=6, after_s=0))
    result = ev.evaluate(_req(_kernel_candidate("        return x\n"), timeout_s=3))
    assert result.error_kind is ErrorKind.MISMATCH and "fake verdict" in result.error_excerpt


def test_every_wait_for_the_gpu_stops_the_clock_not_only_the_first(tmp_path: Path) -> None:
    """Three waits of 2.5 s (memory budget, then the shared lock, then the timing lock) inside a 3 s timeout."""
    ev = SubprocessEvaluator(
        cache_dir=tmp_path, python=_queueing_python(tmp_path, queue_s=2.5, after_s=0.2, waits=3)
    )
    result = ev.evaluate(_req(_kernel_candidate("        return x\n"), timeout_s=3))
    assert result.error_kind is ErrorKind.MISMATCH and "fake verdict" in result.error_excerpt


def test_the_clock_runs_between_waits(tmp_path: Path) -> None:
    """Time outside the waits adds up: three stretches of 1.5 s after short waits exceed a 3 s timeout."""
    ev = SubprocessEvaluator(
        cache_dir=tmp_path, python=_queueing_python(tmp_path, queue_s=0.1, after_s=1.5, waits=3)
    )
    result = ev.evaluate(_req(_kernel_candidate("        return x\n"), timeout_s=3))
    assert result.error_kind is ErrorKind.TIMEOUT


def test_the_clock_runs_once_admitted(tmp_path: Path) -> None:
    ev = SubprocessEvaluator(cache_dir=tmp_path, python=_queueing_python(tmp_path, queue_s=0, after_s=8))
    result = ev.evaluate(_req(_kernel_candidate("        return x\n"), timeout_s=3))
    assert result.error_kind is ErrorKind.TIMEOUT


def test_an_endless_queue_is_an_infrastructure_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from htam_graph.kernels_runtime.parent import evaluator

    monkeypatch.setattr(evaluator, "_MAX_QUEUE_S", 2.0)
    ev = SubprocessEvaluator(cache_dir=tmp_path, python=_queueing_python(tmp_path, queue_s=30, after_s=0))
    result = ev.evaluate(_req(_kernel_candidate("        return x\n"), timeout_s=60))
    assert (
        result.error_kind is ErrorKind.INFRA_ERROR
        and "waited over 2 s for GPU memory or the GPU lock" in result.error_excerpt
    )
