"""Every KernelBench task of the dev split gets a smoke variant whose reference really runs on the CPU.

Set HTAM_SMOKE_TABLE=path to also write the measured table (task, overrides, seconds) as Markdown.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from htam_graph.kernels_runtime.worker import shapes

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
FILES = sorted(KB.glob("level*/*.py"))

pytestmark = pytest.mark.slow


def test_every_task_gets_a_smoke_variant_that_runs_on_cpu() -> None:
    rows: list[tuple[str, str, float, float, float, str]] = []
    failures: list[str] = []
    for path in FILES:
        rel = str(path.relative_to(KB))
        start = time.perf_counter()
        try:
            spec = shapes.smoke_overrides(path.read_text(encoding="utf-8"), name=rel)
        except Exception as e:  # collect all failures, report them together
            failures.append(f"{rel}: {e}")
            continue
        search_s = time.perf_counter() - start
        assert spec.validated == "cpu" and spec.forward_s is not None and spec.build_s is not None
        rows.append((rel, str(spec.overrides), spec.build_s, spec.forward_s, search_s, spec.note))
        print(
            f"{rel}\t{spec.overrides}\tbuild={spec.build_s:.3f}s\tforward={spec.forward_s:.3f}s\t{spec.note}"
        )
    table = os.environ.get("HTAM_SMOKE_TABLE")
    if table:
        lines = ["| task | overrides | build s | forward s | search s | note |", "|---|---|---|---|---|---|"]
        lines += [f"| {r[0]} | `{r[1]}` | {r[2]:.3f} | {r[3]:.3f} | {r[4]:.1f} | {r[5]} |" for r in rows]
        Path(table).write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert not failures, "\n".join(failures)
    assert len(rows) == len(FILES)
    worst = max(r[3] for r in rows)
    print(f"max forward {worst:.3f}s over {len(rows)} tasks")
    # The smoke variant exists to keep a CPU check short: no reference forward may take over 10 s here.
    assert worst < 10.0
