"""notebooks/bench_report.ipynb runs from top to bottom on the sample bench folder (a real kernel via nbclient),
so it cannot rot: its own cell checks that its pandas numbers equal `htam-graph report`'s."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "bench_report.ipynb"
SAMPLE = ROOT / "tests" / "data" / "sample_bench"


def outputs_text(nb: object) -> str:
    parts = []
    for cell in nb.cells:  # type: ignore[attr-defined]
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append(str(out.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


def test_notebook_executes_on_the_sample_bench(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")  # jupyter_core warns (an error here) without it
    monkeypatch.setenv("HTAM_BENCH_DIR", str(SAMPLE))
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    # ipykernel's native spec: the kernel runs this interpreter, so it imports the htam_graph under test;
    # over unix sockets (ipc) in tmp_path, not TCP ports.
    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(tmp_path / "kernel"))
    # A loaded machine can deliver a cell's printed output after its reply: wait for it (nbclient's default of
    # 4 s drops it silently) and fail loudly rather than check a notebook with missing output.
    client = NotebookClient(
        nb,
        km=km,
        timeout=300,
        iopub_timeout=120,
        raise_on_iopub_timeout=True,
        # ipykernel flushes stdout on a timer, so on a loaded machine one print() can arrive as two stream
        # messages; merge them per cell, as Jupyter shows them, so that a printed line is checked whole.
        coalesce_streams=True,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()
    text = outputs_text(nb)
    assert "SYNTHETIC" in text
    assert "consistent with htam-graph report: 4 policy/seed groups" in text
    assert "fast_1_compile" in text
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 1, "the speedup distribution figure"
    assert "{'Attempt'" in text or "'Attempt'" in text  # the exported memory bank was read
