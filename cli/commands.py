"""Registers every sub-command group on the root group. Each feature adds one line here."""

from __future__ import annotations

import click


def register(root: click.Group) -> None:
    """Attach the sub-commands (imported lazily so `--help` stays fast)."""
    # Feature modules add themselves below, one import + add_command each.
    from htam_graph.cli.db import db

    root.add_command(db)
    from htam_graph.cli.memory import memory_group

    root.add_command(memory_group)
    from htam_graph.cli.tasks import tasks

    root.add_command(tasks)
    from htam_graph.cli.run import run

    root.add_command(run)
    from htam_graph.cli.eval import eval_cmd

    root.add_command(eval_cmd)
    from htam_graph.cli.baseline import baseline

    root.add_command(baseline)
    from htam_graph.cli.report import report

    root.add_command(report)
    from htam_graph.cli.bench import bench

    root.add_command(bench)
