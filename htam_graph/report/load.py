"""Reading a bench folder (BENCH_FORMAT: `bench.json` + `results.jsonl`) into the report's rows.

One row per run, with the speed-ups the report counts (`derive_run`; the definitions are
`metrics.DEFINITIONS`), and one row per trajectory step. pandas is imported inside functions so importing this
module does no work.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from htam_graph.errors import HtamError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["UNSTATED", "Bench", "ReportError", "derive_run", "level_label", "load_bench"]

UNSTATED = "unstated"  # a result that does not say its precision policy


class ReportError(HtamError):
    """A bench folder that cannot be reported on (missing or malformed files)."""


@dataclass(frozen=True)
class Bench:
    """One bench folder, loaded: its configuration, one row per run, and one row per trajectory step."""

    path: Path
    name: str
    config: dict[str, Any]
    runs: pd.DataFrame
    steps: pd.DataFrame


def load_bench(path: Path) -> Bench:
    """Read `path/bench.json` and `path/results.jsonl`; raise ReportError (one line) when either is
    unusable."""
    import pandas as pd

    path = Path(path)
    if not path.is_dir():
        raise ReportError(f"{path}: not a bench folder (no such directory)")
    config = _read_config(path / "bench.json")
    rows = _read_results(path / "results.jsonl")
    runs = pd.DataFrame([derive_run(r) for r in rows])
    # Every run carries its precision track: its own field, else the bench's, else "unstated" (never guessed).
    track = str(config.get("precision_policy") or UNSTATED)
    runs["precision_policy"] = [str(r.get("precision_policy") or track) for r in rows]
    runs = runs.sort_values(["policy", "seed", "task"], kind="stable").reset_index(drop=True)
    steps = pd.DataFrame(
        [step for r in rows for step in _steps_of(r)],
        columns=["task", "level", "policy", "seed", "step", "global", "local", "status", "gain", "best_x"],
    )
    return Bench(path=path, name=path.resolve().name, config=config, runs=runs, steps=steps)


def _read_config(file: Path) -> dict[str, Any]:
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise ReportError(f"{file}: not found (is {file.parent} a bench folder?)") from e
    except (OSError, ValueError) as e:
        raise ReportError(f"{file}: unreadable: {e}") from e
    if not isinstance(config, dict):
        raise ReportError(f"{file}: not a JSON object")
    return config


def _read_results(file: Path) -> list[dict[str, Any]]:
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise ReportError(f"{file}: not found (the bench has finished no run yet)") from e
    except OSError as e:
        raise ReportError(f"{file}: unreadable: {e}") from e
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise ReportError(f"{file}:{n}: not valid JSON") from e
        missing = [
            k for k in ("task", "policy", "seed", "status") if not isinstance(row, dict) or k not in row
        ]
        if missing:
            raise ReportError(f"{file}:{n}: a result needs the field(s) {', '.join(missing)}")
        rows.append(row)
    if not rows:
        raise ReportError(f"{file}: holds no finished run")
    return rows


def _num(value: Any) -> float:
    """A float, or NaN for a missing / non-numeric / non-finite value."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value) if math.isfinite(value) else math.nan


def _ratio(num: Any, den: Any) -> float:
    a, b = _num(num), _num(den)
    return a / b if a > 0 and b > 0 else math.nan


def level_label(level: Any) -> str:
    """'1', '2', ... for KernelBench levels; '-' for tasks without one."""
    return str(int(level)) if isinstance(level, int | float) and not isinstance(level, bool) else "-"


def derive_run(r: dict[str, Any]) -> dict[str, Any]:
    """One run's row with the report's derived columns (see the module docstring)."""
    done = r["status"] == "done"
    reference = bool(r.get("best_is_reference")) or not done
    ref_eager, ref_compile = r.get("ref_eager_us"), r.get("ref_compile_us")
    if reference:
        eager_x, compile_x, runtime = 1.0, _ratio(ref_compile, ref_eager), _num(ref_eager)
    else:
        eager_x = _num(r.get("best_speedup_eager_x"))
        if math.isnan(eager_x):
            eager_x = _ratio(ref_eager, r.get("best_runtime_us"))
        compile_x = _num(r.get("best_speedup_compile_x"))
        if math.isnan(compile_x):
            compile_x = _ratio(ref_compile, r.get("best_runtime_us"))
        runtime = _num(r.get("best_runtime_us"))
    if done and not reference and not eager_x > 0:
        raise ReportError(
            f"result {r['task']} / {r['policy']} / seed {r['seed']}: no usable speedup recorded"
        )
    usage = r.get("usage") or {}
    return {
        "task": r["task"],
        "level": level_label(r.get("level")),
        "policy": str(r["policy"]),
        "seed": int(r["seed"]),
        "status": r["status"],
        "error": r.get("error"),
        "returned_correct": done,
        "best_is_reference": reference,
        "speedup_eager_x": eager_x,
        "speedup_compile_x": compile_x,
        "torch_compile_x": _ratio(ref_eager, ref_compile),  # torch.compile's own speedup over eager
        "runtime_us": runtime,
        "ref_eager_us": _num(ref_eager),
        "ref_compile_us": _num(ref_compile),
        "sol_us": _num(r.get("sol_us")),
        "sol_fraction": _ratio(r.get("sol_us"), runtime),
        "best_step": _num(r.get("best_step")) if done and not reference else math.nan,
        "best_global": _best_global(r) if done and not reference else None,
        "correct_steps": int(r.get("correct_steps") or 0),
        "compile_failures": int(r.get("compile_failures") or 0),
        "cost_usd": _num(usage.get("cost_usd")) if usage.get("cost_usd") is not None else 0.0,
        "cost_known": bool(usage.get("cost_known", True)),
        "input_tokens": int(usage.get("input_tokens") or 0),
        "output_tokens": int(usage.get("output_tokens") or 0),
        "gpu_name": r.get("gpu_name"),
        "torch_version": r.get("torch_version"),
        "timing_on_cpu": bool(r.get("timing_on_cpu")),
        "wall_s": _num(r.get("wall_s")),
    }


def _best_global(r: dict[str, Any]) -> str | None:
    """The direction of the step that produced the returned kernel (None when the trajectory lacks it)."""
    best = r.get("best_step")
    for s in r.get("trajectory") or []:
        if best is not None and s.get("step") == best:
            return str(s["global"]) if s.get("global") is not None else None
    return None


def _steps_of(r: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for s in r.get("trajectory") or []:
        gain = _num(s.get("gain"))
        out.append(
            {
                "task": r["task"],
                "level": level_label(r.get("level")),
                "policy": str(r["policy"]),
                "seed": int(r["seed"]),
                "step": int(s.get("step") or 0),
                "global": s.get("global"),
                "local": s.get("local"),
                "status": s.get("status"),
                "gain": 0.0 if math.isnan(gain) else gain,  # a failed step adds no gain
                "best_x": _num(s.get("best_speedup_x")),
            }
        )
    return out
