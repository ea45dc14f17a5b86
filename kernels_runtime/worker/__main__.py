"""The evaluation worker: `python -m htam_graph.kernels_runtime.worker`, spawned fresh by the evaluator.

Protocol (the caller is `evaluator.py`):
- stdin: one JSON object `{"nonce": str, "mode": "eval" | "compile", "requests": [EvalRequest, ...]}`;
- the result file named by env `HTAM_RESULT_PATH` (not stdout: candidate code can print): one JSON line per
  finished request, `{"nonce", "index", "result"}` (mode eval: an EvalResult; mode compile: a CompileOutcome);
- the progress file named by env `HTAM_PROGRESS_PATH`: `ready` once the worker and its guards are up, then
  `start <i>` / `done <i>` per request, so the caller can tell a worker that never started (infra_error) from a
  candidate that killed it (crash), and time out each request separately; `queued <i>` / `admitted <i>` around
  every wait for the GPU (memory budget, shared or exclusive lock; gpulock.py), which the caller does not count
  against the request's timeout (a candidate that forged "queued" would only trade its timeout for the
  evaluator's cap on waiting, `_MAX_QUEUE_S`, and an infra_error);
- mode "facts": one JSON line per request, `{"facts": GpuFacts | null, "excerpt": str}` (facts.py): the device,
  the reference's time, floor and kernels, and the kernels of the request's candidate when it is a kernel;
- under `TRITON_INTERPRET=1`, `@triton.autotune` keeps its first config (interp.py) before any candidate loads;
- env `HTAM_EXT_ROOT`: torch extensions are built under `<root>/<sha256(candidate)[:16]>` (a re-evaluation of the
  same source is warm; two different candidates never share a build dir or its lock).
Both paths are removed from the environment before any candidate code runs. The nonce is checked by the
caller; a candidate that wanted to forge a result would have to find it first (see guards.py for the limits).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from htam_graph.kernels_runtime.paths import extension_dir

# Imported before the candidate: these modules capture the timers and install the guards.
from htam_graph.kernels_runtime.worker import compile_baseline_and_sol, facts, harness, interp
from htam_graph.kernels_runtime.worker.excerpt import exception_excerpt
from htam_graph.kernels_runtime.worker.execution import CandidateFailure, load_candidate
from htam_graph.model import EvalRequest

__all__ = ["main"]


def _emit(out: TextIO, nonce: str, index: int, payload: dict[str, Any]) -> None:
    out.write(json.dumps({"nonce": nonce, "index": index, "result": payload}) + "\n")
    out.flush()
    os.fsync(out.fileno())


def _forward_progress(progress: TextIO, index: int) -> Callable[[str], None]:
    """`queued <i>` / `admitted <i>` around every wait for the GPU (memory budget, shared or exclusive lock)."""

    def tell(event: str) -> None:
        progress.write(f"{event} {index}\n")
        progress.flush()

    return tell


def _compile_only(req: EvalRequest, workdir: Path) -> dict[str, Any]:
    """Import the candidate (which builds its extensions) and report; nothing runs on a device."""
    start = time.perf_counter()
    try:
        load_candidate(req.candidate_source, workdir, {})
    except CandidateFailure as f:
        return {"ok": False, "compile_s": time.perf_counter() - start, "excerpt": f.excerpt}
    except Exception as e:
        return {"ok": False, "compile_s": time.perf_counter() - start, "excerpt": exception_excerpt(e)}
    return {"ok": True, "compile_s": time.perf_counter() - start, "excerpt": ""}


def _facts(req: EvalRequest, workdir: Path) -> dict[str, Any]:
    """The facts for one request, or None with the reason (a failure here never fails a run)."""
    try:
        return {"facts": facts.collect(req, workdir).model_dump(mode="json"), "excerpt": ""}
    except Exception as e:
        return {"facts": None, "excerpt": exception_excerpt(e)}


def main() -> int:
    result_path = os.environ.pop("HTAM_RESULT_PATH")
    progress_path = os.environ.pop("HTAM_PROGRESS_PATH")
    ext_root = os.environ.pop("HTAM_EXT_ROOT", "")
    harness.VARIANT_CACHE_DIR = os.environ.pop("HTAM_VARIANT_CACHE", "")
    compile_baseline_and_sol.SOL_CACHE_DIR = os.environ.pop("HTAM_SOL_CACHE", "")
    facts.FACTS_CACHE_DIR = os.environ.pop("HTAM_FACTS_CACHE", "")
    interp.autotune_first_config()
    payload = json.loads(sys.stdin.read())
    nonce, mode = str(payload["nonce"]), str(payload.get("mode", "eval"))
    requests = [EvalRequest.model_validate(r) for r in payload["requests"]]
    with (
        open(result_path, "a", encoding="utf-8") as out,
        open(progress_path, "a", encoding="utf-8") as progress,
    ):
        state = harness.WorkerState() if mode == "eval" else None
        progress.write("ready\n")
        progress.flush()
        workdir = Path(os.getcwd())
        for i, req in enumerate(requests):
            progress.write(f"start {i}\n")
            progress.flush()
            if ext_root:
                os.environ["TORCH_EXTENSIONS_DIR"] = extension_dir(ext_root, req.candidate_source)
            if state is not None:
                state.progress = _forward_progress(progress, i)
            if mode == "facts":
                result = _facts(req, workdir)
            elif state is None:
                result = _compile_only(req, workdir)
            else:
                result = harness.evaluate_here(req, state).model_dump(mode="json")
            _emit(out, nonce, i, result)
            progress.write(f"done {i}\n")
            progress.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter shutdown: candidate atexit hooks, stray non-daemon threads or CUDA teardown of a faulted
    # context must not turn a finished evaluation into a hang or a crash.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
