"""An Nsight Compute (`ncu`) summary of one kernel of a candidate, for the prompt (`NcuSummary`).

Runs in the evaluator's process (no torch here): `ncu` profiles a child, `python -m
htam_graph.kernels_runtime.worker.ncu_target REQUEST.json`, which loads the task and the candidate, warms the candidate
up outside the profiled range and then calls it once inside `cudaProfilerStart/Stop` (`--profile-from-start
off`), so autotuning and compilation never land in the profile. One launch of the named kernel is measured with
raw metric names (stable across Nsight Compute versions) and read back from `--csv`.

Where `ncu` is not on PATH (the CPU, most CI machines) or cannot read the GPU's counters (no permission), there
is no summary and `note` says why; nothing raises. Summaries are cached on disk per (task, shape, GPU, policy,
candidate source).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from htam_graph.devicefacts import NcuSummary
from htam_graph.kernels_runtime import diskcache
from htam_graph.model import EvalRequest

__all__ = ["METRICS", "kernel_base_name", "ncu_executable", "parse_ncu_csv", "summarise_kernel"]

log = logging.getLogger(__name__)

# raw metric name -> NcuSummary field
METRICS: dict[str, str] = {
    "gpu__time_duration.sum": "duration_us",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_throughput_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "lts__t_sector_hit_rate.pct": "l2_hit_rate_pct",
    "launch__registers_per_thread": "registers_per_thread",
    "launch__grid_size": "grid_size",
    "launch__block_size": "block_size",
}
_INT_FIELDS = frozenset({"registers_per_thread", "grid_size", "block_size"})
_TIME_UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6,
               "second": 1e6}  # fmt: skip
_TIMEOUT_S = 300.0


def ncu_executable() -> str | None:
    """`ncu` on PATH, else None."""
    return shutil.which("ncu")


def kernel_base_name(profiler_name: str) -> str:
    """The function name Nsight Compute matches (`--kernel-name-base function`) from a torch.profiler kernel name:
    `void at::native::foo_kernel<4, float>(float*, int)` -> `foo_kernel`; a Triton kernel's name is itself."""
    name = profiler_name.strip().removeprefix("void ").strip()
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # cut at the first top-level template or parameter list
        if ch in "<(" and depth == 0:
            cut = i
            break
    base = name[:cut].strip()
    return base.rsplit("::", 1)[-1] or profiler_name


def parse_ncu_csv(text: str) -> NcuSummary | None:
    """The first profiled kernel's summary from `ncu --csv --metrics ...` output (its `==PROF==` lines and any
    other preamble are skipped); None when no metric row is found."""
    lines = text.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if '"Metric Name"' in line and '"Metric Value"' in line), None
    )
    if start is None:
        return None
    values: dict[str, Any] = {}
    kernel, first_id = "", None
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        name = (row.get("Metric Name") or "").strip()
        if name not in METRICS:
            continue
        row_id = row.get("ID")
        if first_id is None:
            first_id, kernel = row_id, (row.get("Kernel Name") or "").strip()
        if row_id != first_id:
            continue
        value = _number(row.get("Metric Value") or "")
        if value is None:
            continue
        field = METRICS[name]
        if field == "duration_us":
            value *= _TIME_UNITS.get((row.get("Metric Unit") or "").strip(), 1e-3)
        values[field] = int(value) if field in _INT_FIELDS else value
    if not values:
        return None
    return NcuSummary(kernel=kernel[:160] or "?", **values)


def _number(text: str) -> float | None:
    cleaned = text.strip().replace(",", "")  # ncu runs with LC_ALL=C: commas are thousands separators
    try:
        return float(cleaned)
    except ValueError:
        return None


def summarise_kernel(
    request: EvalRequest, kernel: str, gpu_name: str, python: str, env: dict[str, str], cache_dir: Path
) -> tuple[NcuSummary | None, str]:
    """(summary, note) for one launch of `kernel` in `request`'s candidate; cached per task, shape, GPU, policy
    and candidate source. The note says why there is no summary ("" when there is one)."""
    exe = ncu_executable()
    if exe is None:
        return None, "ncu (Nsight Compute) is not on PATH"
    digest = hashlib.sha256(f"{request.task_source}\0{request.candidate_source}".encode()).hexdigest()
    key = f"ncu|{gpu_name}|{request.shape}|{request.precision_policy.value}|{kernel}|{digest}"

    def compute() -> dict[str, Any]:
        summary, note = _run_ncu(exe, request, kernel, python, env)
        return {"summary": summary.model_dump() if summary else None, "note": note}

    cached = diskcache.cached_json(str(cache_dir), key, compute, _decode)
    summary = NcuSummary.model_validate(cached["summary"]) if cached["summary"] else None
    return summary, str(cached["note"])


def _decode(cached: Any) -> dict[str, Any] | None:
    if not (isinstance(cached, dict) and "summary" in cached and "note" in cached):
        return None
    with contextlib.suppress(ValueError):
        if cached["summary"] is not None:
            NcuSummary.model_validate(cached["summary"])
        return cached
    return None


def _run_ncu(
    exe: str, request: EvalRequest, kernel: str, python: str, env: dict[str, str]
) -> tuple[NcuSummary | None, str]:
    with tempfile.TemporaryDirectory(prefix="htam-ncu-") as tmp:
        path = Path(tmp) / "request.json"
        path.write_text(request.model_dump_json(), encoding="utf-8")
        cmd = [
            # --clock-control none: measure the GPU at the clocks it runs at; ncu's default locks them to base,
            # which changes a shared machine's settings and the numbers the timing protocol sees
            exe, "--csv", "--clock-control", "none", "--target-processes", "all", "--profile-from-start", "off",
            "--kernel-name", f"regex:{re.escape(kernel_base_name(kernel))}", "--launch-count", "1",
            "--metrics", ",".join(METRICS), python, "-m", "htam_graph.kernels_runtime.worker.ncu_target", str(path),
        ]  # fmt: skip
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp, start_new_session=True,
            env={**env, "LC_ALL": "C"},
        )  # fmt: skip
        try:
            out, err = proc.communicate(timeout=_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return None, f"ncu did not finish within {_TIMEOUT_S:g} s"
    text = out.decode("utf-8", "replace")
    summary = parse_ncu_csv(text)
    if summary is not None:
        return summary, ""
    problem = (err.decode("utf-8", "replace") + "\n" + text).strip()
    if "ERR_NVGPUCTRPERM" in problem:
        return None, "ncu has no permission to read this GPU's performance counters (ERR_NVGPUCTRPERM)"
    tail = problem.splitlines()[-3:] if problem else []
    log.info("ncu gave no summary for %s (exit %s): %s", kernel, proc.returncode, json.dumps(tail))
    return None, f"ncu gave no summary (exit {proc.returncode}): {' / '.join(tail)[:300]}"
