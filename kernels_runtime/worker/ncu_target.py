"""The process `ncu` profiles (ncu.py): `python -m htam_graph.kernels_runtime.worker.ncu_target REQUEST.json`.

Loads the request's task at its main shape and its candidate (one that the loop evaluated correct), warms the
candidate up (compilation, autotuning) with the profiler off, then runs one forward call between
`cudaProfilerStart` and `cudaProfilerStop`, the only range `ncu --profile-from-start off` measures.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

from htam_graph.kernels_runtime.worker import checks, guards, harness
from htam_graph.kernels_runtime.worker.execution import build_models, load_candidate, make_inputs
from htam_graph.model import EvalRequest

_WARMUP_CALLS = 3


def main(argv: list[str]) -> int:
    req = EvalRequest.model_validate_json(Path(argv[1]).read_text(encoding="utf-8"))
    device = torch.device("cuda")
    guards.pin_precision(req.precision_policy)
    overrides = harness.main_overrides(req)
    task = harness.load_task_variant(req, overrides)
    with tempfile.TemporaryDirectory(prefix="htam-ncu-cand-") as tmp:
        candidate, cand_file = load_candidate(req.candidate_source, Path(tmp), overrides)
        _, cand, _ = build_models(task, candidate, 0, device, cand_file)
        inputs = make_inputs(task, 0, device)
        with torch.no_grad():
            for _ in range(_WARMUP_CALLS):
                cand(*checks.clone_inputs(inputs))
            args = checks.clone_inputs(inputs)
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            cand(*args)
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
