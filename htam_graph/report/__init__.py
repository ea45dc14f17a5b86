"""The report engine: tables, figures and one HTML page for a bench folder, or several side by side.

`load` reads a bench folder into one row per run and per step; `metrics` computes the numbers (their
definitions live there); `plots` draws the figures (matplotlib, imported lazily); `render` assembles Markdown
and HTML; `writer` writes one folder's report (`write_report`) and `compare` several folders side by side
(`write_compare`). The click command lives in `htam_graph.cli.report`.
"""
