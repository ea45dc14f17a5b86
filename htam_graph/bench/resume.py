"""Resuming a bench run that a device-call cut (or Ctrl-C) ended mid-run, from the files it left.

A run writes `trajectory.json` and `candidates/step_<k>.py` after every step (`RunFiles`), and every step's
attempt is already in the shared memory. `load_resume` reads the steps back so that the loop continues at
the next one, under the same run key (`OptimizationLoop.run(resume=)`), rather than from step 1: when device
calls are shorter than a run (one GPU, 8 workers, ~9-minute calls), restarting would lose most of the work of
every run in flight at each cut.

A run that stopped awaiting a reply left its request in `pending/step_<k+1>.request.json` (after k steps,
maybe none): it is resumed at that step with the saved request and random state (`Resume.pending`), so it
continues exactly as if the reply had come at once.

Nothing is resumed from files that do not read back exactly: a missing or malformed trajectory, a step out of
order, an attempt key of another run, or a candidate that was evaluated but whose source file is missing all
mean a fresh start (a pending request that does not read back is an error: its run cannot go on without it).
Only the local executor keeps the files between bench invocations (a Ray task runs in a node-local folder), so
Ray runs always start fresh.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from htam_graph.llm.pending import PENDING_DIR, read_pending
from htam_graph.model import ErrorKind, EvalResult, Usage
from htam_graph.runtypes import GenerationRecord, Resume, StepOutcome

__all__ = ["KEPT_FOR_RESUME", "load_resume"]

log = logging.getLogger(__name__)

# What a restarted job keeps of its run folder.
KEPT_FOR_RESUME = ("trajectory.json", "candidates", PENDING_DIR)


def load_resume(run_dir: Path, steps: int) -> tuple[Resume, list[dict[str, Any]]] | None:
    """The first `steps` steps a cut run left in `run_dir` and their trajectory rows, with the request it
    awaits a reply for, if any; None to start fresh."""
    path = run_dir / "trajectory.json"
    rows: list[dict[str, Any]] = []
    try:
        if path.is_file():
            rows = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(rows, list):
                return None
            rows = rows[:steps]
        outcomes = tuple(_outcome(run_dir, k, row) for k, row in enumerate(rows, start=1))
    except (OSError, ValueError, KeyError, TypeError, ValidationError) as e:
        log.warning("not resuming %s: %s", run_dir, e)
        return None
    awaited = read_pending(run_dir / PENDING_DIR, len(rows) + 1) if len(rows) < steps else None
    if not outcomes and awaited is None:
        return None
    run_key = awaited.run_key if awaited is not None else outcomes[0].attempt_key.rsplit("-s", 1)[0]
    if any(o.attempt_key != f"{run_key}-s{o.step}" for o in outcomes):
        log.warning("not resuming %s: its steps belong to different runs", run_dir)
        return None
    return Resume(run_key, outcomes, awaited.pending if awaited is not None else None), rows


def _outcome(run_dir: Path, k: int, row: dict[str, Any]) -> StepOutcome:
    """Step k of the trajectory as the loop returned it (raises ValueError when it does not read back)."""
    if row.get("step") != k:
        raise ValueError(f"step {k} of the trajectory is numbered {row.get('step')}")
    source_path = run_dir / "candidates" / f"step_{k}.py"
    source = source_path.read_text(encoding="utf-8") if source_path.is_file() else None
    evaluation = EvalResult.model_validate(row["eval"]) if row.get("eval") else None
    if evaluation is not None and source is None:
        raise ValueError(f"step {k} was evaluated but its candidate file is missing")
    status = row["status"]
    if status not in ("improved", "correct", "failed"):
        raise ValueError(f"step {k} has status {status!r}")
    return StepOutcome(
        step=k,
        global_key=str(row["global"]),
        local_key=row.get("local"),
        direction_probability=float(row.get("probability") or 0.0),
        status=status,
        error_kind=ErrorKind(row["error_kind"]) if row.get("error_kind") else None,
        error_excerpt=str(row.get("error_excerpt") or ""),
        speedup_x=float(row["speedup_x"]) if row.get("speedup_x") is not None else None,
        best_speedup_x=float(row["best_speedup_x"]),
        gain=float(row["gain"]),
        source=source,
        result=evaluation,
        usage=Usage.model_validate(row.get("usage") or {}),
        attempt_key=str(row["attempt_key"]),
        generation=_generation(run_dir, k, row.get("generation")),
    )


def _generation(run_dir: Path, k: int, data: Any) -> GenerationRecord | None:
    """Step k's generation record, with its raw reply read back from beside its candidate."""
    if not data:
        return None
    reply = run_dir / "candidates" / f"step_{k}.reply.md"
    return GenerationRecord(
        offered=tuple(str(key) for key in data["offered"]),
        named=data.get("named"),
        chosen=data.get("chosen"),
        extraction=str(data.get("extraction") or ""),
        finish_reason=str(data.get("finish_reason") or ""),
        truncated=bool(data.get("truncated")),
        latency_s=float(data["latency_s"]) if data.get("latency_s") is not None else None,
        attempts=int(data.get("attempts") or 1),
        model=str(data.get("model") or ""),
        infra_error=bool(data.get("infra_error")),
        raw_text=reply.read_text(encoding="utf-8") if reply.is_file() else "",
    )
