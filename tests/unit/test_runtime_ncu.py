"""The `ncu` summary of a kernel (kernels_runtime/parent/ncu.py): parsing, kernel names, and the paths where Nsight
Compute is absent, fails, or answers (a fake `ncu` on PATH stands in for it on the CPU)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from htam_graph.kernels_runtime.parent import ncu
from htam_graph.model import EvalRequest

CSV = """==PROF== Connected to process 4242 (/usr/bin/python3.11)
==PROF== Profiling "fused_kernel" - 0: 0%....50%....100% - 9 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3.11","127.0.0.1","fused_kernel","1","7","(128, 1, 1)","(1024, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","12.35"
"0","4242","python3.11","127.0.0.1","fused_kernel","1","7","(128, 1, 1)","(1024, 1, 1)","0","9.0","Command line profiler metrics","sm__throughput.avg.pct_of_peak_sustained_elapsed","%","21.40"
"0","4242","python3.11","127.0.0.1","fused_kernel","1","7","(128, 1, 1)","(1024, 1, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","80.90"
"0","4242","python3.11","127.0.0.1","fused_kernel","1","7","(128, 1, 1)","(1024, 1, 1)","0","9.0","Command line profiler metrics","launch__registers_per_thread","register/thread","32"
"0","4242","python3.11","127.0.0.1","fused_kernel","1","7","(128, 1, 1)","(1024, 1, 1)","0","9.0","Command line profiler metrics","launch__grid_size","","1,024"
"1","4242","python3.11","127.0.0.1","fused_kernel","1","7","(128, 1, 1)","(1024, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","99.0"
==PROF== Disconnected from process 4242
"""


def test_the_first_profiled_kernels_metrics_are_read_with_units() -> None:
    summary = ncu.parse_ncu_csv(CSV)
    assert summary is not None and summary.kernel == "fused_kernel"
    assert summary.duration_us == pytest.approx(12.35)  # the first launch (ID 0), not the second
    assert summary.sm_throughput_pct == pytest.approx(21.4) and summary.dram_throughput_pct == pytest.approx(
        80.9
    )
    assert summary.registers_per_thread == 32 and summary.grid_size == 1024
    assert summary.achieved_occupancy_pct is None  # not in the output: left out, not invented
    ns = CSV.replace('"usecond","12.35"', '"nsecond","12350"')
    assert ncu.parse_ncu_csv(ns).duration_us == pytest.approx(12.35)  # type: ignore[union-attr]


def test_output_without_metric_rows_gives_no_summary() -> None:
    assert ncu.parse_ncu_csv("==PROF== ERR_NVGPUCTRPERM - no permission\n") is None
    assert ncu.parse_ncu_csv("") is None


def test_kernel_names_are_reduced_to_the_function_name_ncu_matches() -> None:
    assert ncu.kernel_base_name("fused_kernel") == "fused_kernel"
    assert ncu.kernel_base_name(
        "void at::native::vectorized_elementwise_kernel<4, at::native::Func>(int, float*)"
    ) == ("vectorized_elementwise_kernel")
    assert ncu.kernel_base_name("my_kernel(float const*, float*, int)") == "my_kernel"


def _request() -> EvalRequest:
    return EvalRequest(task_key="t", task_source="TASK", candidate_source="CAND", device="cuda")


def test_without_ncu_on_path_there_is_no_summary_and_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no ncu anywhere
    summary, note = ncu.summarise_kernel(
        _request(), "k", "NVIDIA H200", "python", dict(os.environ), tmp_path / "c"
    )
    assert summary is None and note == "ncu (Nsight Compute) is not on PATH"
    assert not (tmp_path / "c").exists()  # nothing measured, nothing cached


def _fake_ncu(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "ncu"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def test_a_summary_is_measured_once_per_task_shape_gpu_and_candidate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.txt"
    csv_file = tmp_path / "out.csv"
    csv_file.write_text(CSV)
    _fake_ncu(tmp_path / "bin", f'echo "$@" >> {calls}\n/bin/cat {csv_file}\n')
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    cache = tmp_path / "cache"
    first = ncu.summarise_kernel(_request(), "fused_kernel", "NVIDIA H200", "python", dict(os.environ), cache)
    again = ncu.summarise_kernel(_request(), "fused_kernel", "NVIDIA H200", "python", dict(os.environ), cache)
    assert first == again and first[0] is not None and first[1] == ""
    args = calls.read_text().splitlines()
    assert len(args) == 1  # the second answer came from the cache
    assert "--profile-from-start off" in args[0] and "regex:fused_kernel" in args[0]
    assert "htam_graph.kernels_runtime.worker.ncu_target" in args[0]
    other = _request().model_copy(update={"candidate_source": "OTHER"})
    ncu.summarise_kernel(other, "fused_kernel", "NVIDIA H200", "python", dict(os.environ), cache)
    assert len(calls.read_text().splitlines()) == 2  # another candidate is measured again


def test_no_permission_is_said_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_ncu(
        tmp_path / "bin",
        'echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission" >&2\nexit 1\n',
    )
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    summary, note = ncu.summarise_kernel(_request(), "k", "GPU", "python", dict(os.environ), tmp_path / "c")
    assert summary is None and "ERR_NVGPUCTRPERM" in note and "\n" not in note
