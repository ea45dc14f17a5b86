"""The Robust-KBench layernorm sample at test sizes: the same task code (`func_forward.py`) and the same
configuration structure (batch 1/8, random/standard init, 1 or N features), with the feature dims shrunk, so the
interpreter runs a candidate in seconds rather than minutes. Tests of the task format itself read the sample as
committed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "robust_kbench"
SMALL = {"num_features": {64: 4, 1: 1}, "dim1": {256: 8}, "dim2": {256: 16}}


def _shrink(config: dict[str, int | str]) -> dict[str, int | str]:
    return {k: SMALL[k][v] if k in SMALL and isinstance(v, int) else v for k, v in config.items()}


def small_sample(dst: Path) -> Path:
    """A copy of the sample folder under `dst` with every declared size shrunk; returns the folder to scan."""
    root = dst / "robust_kbench_small"
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copytree(SAMPLE, root)
    path = root / "layernorm" / "config_forward.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    shrunk = {key: [_shrink(c) for c in configs] for key, configs in config.items()}
    path.write_text(json.dumps(shrunk, indent=4), encoding="utf-8")
    return root
