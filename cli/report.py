"""`htam-graph report DIR [DIR2 ...]`: the report of a bench folder, or several folders side by side."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("report")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Output folder [one DIR: DIR/report; several: ./report_compare].",
)
def report(dirs: tuple[Path, ...], out: Path | None) -> None:
    """Tables (Markdown, CSV, JSON), figures (PNG) and one self-contained report.html for a bench folder
    written by `htam-graph bench`. With several folders, a comparison keyed by folder and policy: overall and
    per-level tables, best speedup by step on the runs they share, which reaches the shared best first, the
    shared runs whose kernels differ by more than 20 %, and (when the folders ran different runs) the overall
    table again on the runs they share."""
    from htam_graph.report.compare import write_compare
    from htam_graph.report.writer import write_report

    if len(dirs) == 1:
        html = write_report(dirs[0], out)
    else:
        html = write_compare(list(dirs), out if out is not None else Path("report_compare"))
    click.echo(f"wrote {html.parent}/ ({html.name}, report tables and figures)")
