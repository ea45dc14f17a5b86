"""Per-call checks (kernels_runtime.worker.checks), guards, timing statistics, speed of light, excerpts and the recorder."""

from __future__ import annotations

import time

import pytest
import torch

from htam_graph.kernels_runtime.recorder import ALL_CHECKS, Recorder, tolerances
from htam_graph.kernels_runtime.worker import checks, guards, sol, timing_protocol
from htam_graph.kernels_runtime.worker.excerpt import MAX_EXCERPT, build_log_excerpt, exception_excerpt
from htam_graph.kernels_runtime.worker.execution import CandidateFailure
from htam_graph.kernels_runtime.worker.trials import TrialContext, verify_guards
from htam_graph.model import ErrorKind, EvalRequest, PrecisionPolicy

CPU = torch.device("cpu")


# ------------------------------------------------------------------ comparison
def test_compare_passes_within_tolerance_and_reports_errors() -> None:
    ref = torch.linspace(-1, 1, 100)
    c = checks.compare_outputs(ref + 5e-5, ref, 1e-4, 1e-4)
    assert c.ok and 0 < c.max_abs_err <= 6e-5


def test_compare_rejects_outside_tolerance_nan_inf_shape_dtype_structure() -> None:
    ref = torch.linspace(1, 2, 10)
    assert not checks.compare_outputs(ref + 1e-2, ref, 1e-4, 1e-4).ok
    bad = ref.clone()
    bad[3] = float("nan")
    assert (
        "NaN" in checks.compare_outputs(bad, ref, 1e9, 1e9).reason
    )  # NaN never passes, whatever the tolerance
    bad[3] = float("inf")
    assert not checks.compare_outputs(bad, ref, 1e9, 1e9).ok
    assert "shape" in checks.compare_outputs(ref.reshape(2, 5), ref, 1e-4, 1e-4).reason
    assert "dtype" in checks.compare_outputs(ref.double(), ref, 1e-4, 1e-4).reason
    assert "outputs" in checks.compare_outputs((ref, ref), ref, 1e-4, 1e-4).reason


def test_compare_tuple_outputs_and_integers_exactly() -> None:
    a, b = torch.rand(4), torch.arange(4)
    assert checks.compare_outputs((a, b), (a.clone(), b.clone()), 1e-4, 1e-4).ok
    assert not checks.compare_outputs((a, b + 1), (a, b), 1e-4, 1e-4).ok


def test_inputs_changed_detects_in_place_writes() -> None:
    x = torch.rand(8)
    y = x.clone()
    assert checks.inputs_changed([x], [y]) is None
    y.add_(1)
    assert "modified" in (checks.inputs_changed([x], [y]) or "")


def test_plain_tensor_output_rejects_subclass_alias_and_meta() -> None:
    x = torch.rand(8)

    class Sub(torch.Tensor):
        pass

    assert checks.plain_tensor_problem(x.clone(), [x], CPU) is None
    assert "not a plain" in (checks.plain_tensor_problem(x.clone().as_subclass(Sub), [x], CPU) or "")
    assert "shares memory" in (checks.plain_tensor_problem(x[2:], [x], CPU) or "")
    assert "shares memory" in (checks.plain_tensor_problem(x.view(2, 4), [x], CPU) or "")
    assert checks.plain_tensor_problem(torch.empty(8, device="meta"), [x], CPU) is not None


def test_degenerate_reasons() -> None:
    x = torch.rand(64)
    samples = [checks.flatten(torch.rand(16)), checks.flatten(torch.rand(16))]
    assert checks.degenerate_reason(torch.tanh(x), samples, [x], 1e-4, 1e-4) is None
    assert "zeros" in (checks.degenerate_reason(torch.zeros(64), samples, [x], 1e-4, 1e-4) or "")
    assert "constant" in (checks.degenerate_reason(torch.full((64,), 3.0), samples, [x], 1e-4, 1e-4) or "")
    same = [[torch.ones(4)], [torch.ones(4)]]
    assert "depend" in (checks.degenerate_reason(torch.tanh(x), same, [x], 1e-4, 1e-4) or "")
    assert "equals input" in (checks.degenerate_reason(x.clone(), samples, [x], 1e-4, 1e-4) or "")
    nan = torch.tanh(x)
    nan[0] = float("nan")
    assert "NaN" in (checks.degenerate_reason(nan, samples, [x], 1e-4, 1e-4) or "")


def test_degeneracy_sample_does_not_alias_with_the_row_length() -> None:
    """An exclusive cumsum has an all-zero first column. A regular stride that is a multiple of the row length saw
    only that column (the H200 cumsum_exclusive case, 32768 x 32768 every 2**18) and called the task degenerate."""
    from htam_graph.kernels_runtime.worker import trials

    rows, cols = 2 * trials._SAMPLE, 64  # a stride of numel // _SAMPLE = 128 = 2 rows would hit column 0 only

    def exclusive_cumsum(seed: int) -> torch.Tensor:
        x = torch.rand(rows, cols, generator=torch.Generator().manual_seed(seed))
        return torch.cat([torch.zeros(rows, 1), torch.cumsum(x[:, :-1], dim=1)], dim=1)

    outs = [exclusive_cumsum(seed) for seed in (1, 2, 3)]
    samples = [trials._sample(o) for o in outs]
    assert checks.degenerate_reason(outs[0], samples, [], 1e-4, 1e-4) is None
    positions = trials.sample_positions(rows * cols, torch.device("cpu"))
    assert len(positions) == trials._SAMPLE and int(positions.max()) < rows * cols
    assert len(set((positions % cols).tolist())) == cols  # every column is sampled
    # the old regular stride, for the record: it saw column 0 alone
    assert set((torch.arange(0, rows * cols, rows * cols // trials._SAMPLE) % cols).tolist()) == {0}
    small = trials.sample_positions(10, torch.device("cpu"))
    assert small.tolist() == list(range(10))


def test_bitwise_equal_is_nan_aware() -> None:
    a = torch.tensor([1.0, float("nan")])
    assert checks.bitwise_equal(a, a.clone())
    assert not checks.bitwise_equal(a, torch.tensor([1.0, 2.0]))


def test_poison_allocator_runs_on_cpu() -> None:
    checks.poison_allocator(CPU, 1 << 20)  # must not raise; the effect is exercised by the adversarial corpus


# ------------------------------------------------------------------ guards
@pytest.fixture(autouse=True)
def _restore_precision_flags():
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
    )
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[0], saved[1]
    torch.set_float32_matmul_precision(saved[2])


def _ctx() -> TrialContext:
    guards.pin_precision(PrecisionPolicy.FP32_STRICT)  # what the worker does before any candidate code
    return TrialContext(
        CPU,
        PrecisionPolicy.FP32_STRICT,
        1e-4,
        1e-4,
        True,
        guards.LaunchCounter(),
        guards.snapshot_identities(),
        "c.py",
    )


def test_timer_identity_detects_a_patched_perf_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _ctx()
    verify_guards(ctx)
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    with pytest.raises(CandidateFailure) as info:
        verify_guards(ctx)
    assert info.value.kind is ErrorKind.HACK_DETECTED and info.value.check == "timer_identity"


def test_timer_identity_detects_a_patched_cuda_event(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _ctx()
    monkeypatch.setattr(torch.cuda, "Event", object)
    with pytest.raises(CandidateFailure) as info:
        verify_guards(ctx)
    assert info.value.check == "timer_identity"


def test_harness_identity_detects_a_patched_comparison(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _ctx()
    monkeypatch.setattr(torch, "isfinite", lambda t: torch.ones_like(t, dtype=torch.bool))
    with pytest.raises(CandidateFailure) as info:
        verify_guards(ctx)
    assert info.value.check == "harness_identity"


def test_tf32_flag_flip_is_detected_under_fp32_strict() -> None:
    ctx = _ctx()
    guards.pin_precision(PrecisionPolicy.FP32_STRICT)
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        with pytest.raises(CandidateFailure) as info:
            verify_guards(ctx)
        assert info.value.check == "tf32_pinned_off"
        assert guards.precision_violation(PrecisionPolicy.TF32) is None
    finally:
        guards.pin_precision(PrecisionPolicy.FP32_STRICT)
    assert guards.precision_violation(PrecisionPolicy.FP32_STRICT) is None


# ------------------------------------------------------------------ timing and speed of light
def test_cpu_interleaved_timing_times_every_callable() -> None:
    calls: list[str] = []
    t = timing_protocol.time_interleaved(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, CPU, 6, 1
    )
    assert len(t.samples_us["a"]) == 6 and len(t.samples_us["b"]) == 6 and t.on_cpu
    assert calls[2:6] == ["a", "b", "b", "a"]  # order rotates run by run (after one warm-up each)
    median, iqr = timing_protocol.summarise([1.0, 2.0, 3.0, 4.0, 100.0])
    assert median == 3.0 and iqr > 0


def test_wall_cross_check_flags_event_times_far_below_wall_time() -> None:
    t = timing_protocol.Timings(samples_us={"cand": [10.0] * 5}, wall_us={"cand": [5000.0] * 5}, on_cpu=False)
    assert t.wall_problem("cand")
    t = timing_protocol.Timings(
        samples_us={"cand": [4900.0] * 5}, wall_us={"cand": [5000.0] * 5}, on_cpu=False
    )
    assert t.wall_problem("cand") is None


def test_speed_of_light_floors_and_verdicts() -> None:
    peaks = sol.GPU_TABLE["H200"]
    x = torch.empty(1 << 20)  # 4 MiB read
    floor = sol.floor_for(
        x.nbytes, torch.empty(1 << 20).nbytes, None, peaks, PrecisionPolicy.FP32_STRICT, l2_bytes=64 << 20
    )
    assert floor.bytes_floor_us == pytest.approx((4 << 20) / 4.3e12 * 1e6)  # output < L2 is not counted
    assert sol.judge(floor.bytes_floor_us * 0.5, floor).hack
    assert not sol.judge(floor.bytes_floor_us * 2, floor).flagged
    with_flops = sol.floor_for(x.nbytes, x.nbytes, 1e12, peaks, PrecisionPolicy.FP32_STRICT, 64 << 20)
    verdict = sol.judge(with_flops.flop_floor_us * 0.5, with_flops)
    assert verdict.flagged and not verdict.hack  # below the FLOP floor only: flagged, not a hack
    assert sol.peaks_for("NVIDIA H200") is peaks and sol.peaks_for("Quadro X") is None
    assert peaks.compute_peak(PrecisionPolicy.FP32_STRICT) >= peaks.fp32_flops


def test_flop_count_of_a_matmul() -> None:
    a, b = torch.rand(8, 16), torch.rand(16, 4)
    assert sol.count_flops(torch.matmul, [a, b]) == 2 * 8 * 16 * 4


# ------------------------------------------------------------------ excerpts and recorder
def test_excerpt_keeps_the_candidate_frame_and_is_short() -> None:
    def boom() -> None:
        raise ValueError("x" * 5000)

    try:
        boom()
    except ValueError as e:
        text = exception_excerpt(e, __file__)
    assert "in boom" in text and len(text) <= MAX_EXCERPT + 10
    log = "\n".join(["noise"] * 500 + ["k.cu(3): error: identifier 'foo' is undefined", "  ^"])
    assert "undefined" in build_log_excerpt(log) and len(build_log_excerpt(log)) < 200


def test_recorder_records_every_check_and_first_failure_wins() -> None:
    req = EvalRequest(task_key="t", task_source="", candidate_source="", device="cpu")
    rec = Recorder(req)
    rec.ok("static_source")
    rec.fail(ErrorKind.MISMATCH, "first", "correctness")
    rec.fail(ErrorKind.HACK_DETECTED, "second", "device_sync")
    result = rec.result()
    assert result.error_kind is ErrorKind.MISMATCH and result.error_excerpt == "first" and not result.correct
    assert set(ALL_CHECKS) <= set(result.checks)
    assert result.checks["device_sync"].startswith("skipped")
    assert tolerances(req) == (1e-4, 1e-4)
    loose = EvalRequest(
        task_key="t", task_source="", candidate_source="", precision_policy=PrecisionPolicy.BF16, atol=0.5
    )
    assert tolerances(loose) == (1e-2, 0.5)


def _trace(*events: tuple[str, str, int, float, float]) -> dict[str, object]:
    """A Kineto chrome trace with (category, name, stream, start µs, duration µs) GPU events."""
    return {
        "traceEvents": [
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "ts": ts,
                "dur": dur,
                "args": {"device": 0, "stream": stream},
            }
            for cat, name, stream, ts, dur in events
        ]
        + [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0.0, "dur": 5.0, "args": {}}]
    }


START = ("kernel", "spin_kernel(long)", 7, 1000.0, 1000.0)  # the head-start marker: 1000-2000 µs
END = ("kernel", "spin_kernel(long)", 7, 2100.0, 1.0)  # the end marker, queued after the call


def test_stream_audit_accepts_work_inside_the_callers_window() -> None:
    ok = timing_protocol.streams_of_trace(
        _trace(
            START, ("kernel", "tanh_kernel", 7, 2001.0, 50.0), ("gpu_memset", "Memset", 7, 2060.0, 2.0), END
        )
    )
    assert ok.observed and ok.caller == 7 and ok.activities == 2 and ok.problem() is None
    # cuDNN's transposed-convolution engines: other streams, forked after the start and joined before the end.
    forked = timing_protocol.streams_of_trace(
        _trace(
            START,
            ("kernel", "fft2d_r2c_32x32", 13, 2002.0, 40.0),
            ("kernel", "setTensor", 7, 2050.0, 5.0),
            END,
        )
    )
    assert forked.problem() is None and forked.other_streams == 1 and "forked and joined" in forked.describe()


def test_stream_audit_flags_work_outside_the_window() -> None:
    early = timing_protocol.streams_of_trace(_trace(START, ("kernel", "tanh_kernel", 13, 1010.0, 30.0), END))
    problem = early.problem()
    assert (
        problem is not None
        and "1 of 1" in problem
        and "tanh_kernel (stream 13) started before the start" in problem
    )
    late = timing_protocol.streams_of_trace(_trace(START, ("kernel", "tanh_kernel", 13, 2001.0, 500.0), END))
    assert "ended after the end" in (late.problem() or "")
    # Fewer than two markers: the profiler saw no GPU activity of ours (no CUPTI), so the audit vouches for nothing.
    blind = timing_protocol.streams_of_trace(_trace(("kernel", "tanh_kernel", 13, 0.0, 1.0)))
    assert not blind.observed and blind.problem() is None
    assert not timing_protocol.streams_of_trace(
        _trace(START, ("kernel", "tanh_kernel", 7, 2001.0, 5.0))
    ).observed


def test_head_start_covers_the_host_launch_within_bounds() -> None:
    assert timing_protocol.head_start_us([]) == timing_protocol.HEAD_START_MIN_US
    assert (
        timing_protocol.head_start_us([10.0, 12.0, 11.0]) == timing_protocol.HEAD_START_MIN_US
    )  # fast launches: the 1 ms floor
    assert timing_protocol.head_start_us([900.0, 1000.0, 1100.0]) == pytest.approx(3000.0)
    assert timing_protocol.head_start_us([1e6]) == timing_protocol.HEAD_START_MAX_US


def test_timings_say_how_they_were_taken() -> None:
    t = timing_protocol.Timings(samples_us={"cand": [10.0] * 4}, wall_us={"cand": [11.0] * 4}, protocol=timing_protocol.HEAD_START,
                       head_start_us={"cand": 2500.0}, starved_runs={"cand": 1})  # fmt: skip
    assert t.describe("cand").startswith("head start 2.5 ms, host launch outlasted it in 1/4 runs")
    t = timing_protocol.Timings(
        samples_us={"cand": [10.0]}, wall_us={"cand": [11.0]}, protocol=timing_protocol.SYNC_IN_WINDOW
    )
    assert t.describe("cand").startswith("sync-in-window")
    cpu = timing_protocol.time_interleaved({"a": lambda: None}, CPU, 2, 0)
    assert cpu.protocol == timing_protocol.CPU_PERF_COUNTER and cpu.describe("a") == "CPU: perf_counter"


def test_a_launch_bound_call_costs_its_host_launch_time() -> None:
    t = timing_protocol.Timings(samples_us={"a": [40.0] * 4, "b": [500.0] * 4}, wall_us={"a": [50.0] * 4, "b": [510.0] * 4},
                       head_start_us={"a": 1000.0, "b": 1000.0}, launch_us={"a": [90.0, 100.0, 110.0], "b": [20.0] * 3})  # fmt: skip
    assert (
        t.time_us("a") == 100.0
        and t.host_bound("a")
        and "host-bound: launch 100.0 µs > GPU 40.0 µs" in t.describe("a")
    )
    assert t.time_us("b") == 500.0 and not t.host_bound("b") and "host-bound" not in t.describe("b")
    assert (
        timing_protocol.Timings(samples_us={"c": [7.0]}, wall_us={"c": [7.0]}).time_us("c") == 7.0
    )  # not measured: events


def test_a_call_that_blocks_on_the_device_counts_its_sync_in_window_time() -> None:
    t = timing_protocol.Timings(samples_us={"a": [12700.0] * 20}, wall_us={"a": [12800.0] * 20}, head_start_us={"a": 47700.0},
                       starved_runs={"a": 20}, launch_us={"a": [15600.0] * 3}, sync_in_window={"a"})  # fmt: skip
    assert t.time_us("a") == 12700.0 and not t.host_bound("a")  # host work is already inside the window
    assert "timed again sync-in-window" in t.describe("a") and "ran out in 20/20 runs" in t.describe("a")


def test_scaled_atols_tighten_tiny_outputs_only() -> None:
    tiny = torch.softmax(torch.rand(2, 20000), dim=1)  # every value ~3e-5 to ~8e-5
    (atol,) = checks.scaled_atols(tiny, 1e-4)
    assert atol == pytest.approx(1e-4 * float(tiny.max()))
    # never above the request's tolerance; integer, all-zero and large leaves keep it
    assert checks.scaled_atols((torch.rand(8) * 10, torch.zeros(3), torch.arange(3)), 1e-4) == [1e-4] * 3
    uniform = torch.full_like(tiny, 1.0 / tiny.shape[1])
    assert checks.compare_outputs(uniform, tiny, 1e-4, 1e-4).ok  # why the scaled tolerance exists
    assert not checks.compare_outputs(uniform, tiny, 1e-4, [atol]).ok
    assert checks.compare_outputs(tiny.clone(), tiny, 1e-4, [atol]).ok
    with pytest.raises(ValueError):
        checks.compare_outputs(tiny, tiny, 1e-4, [atol, atol])


def test_trivial_output_reason_at_the_scaled_tolerance() -> None:
    tiny = torch.softmax(torch.rand(2, 20000), dim=1)
    assert "zeros" in (checks.trivial_output_reason(tiny, 1e-4, 1e-4) or "")
    assert checks.trivial_output_reason(tiny, 1e-4, checks.scaled_atols(tiny, 1e-4)) is None
    assert checks.trivial_output_reason(torch.full((8,), 3e-6), 1e-4, [3e-10]) is not None  # a true constant
    nan = tiny.clone()
    nan[0, 0] = float("nan")
    assert checks.trivial_output_reason(nan, 1e-4, 1e-4) is None  # non-finite: degenerate, not tiny
