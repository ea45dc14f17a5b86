"""Registers every sub-command group on the root group. Each feature adds one line here."""

from __future__ import annotations

import click


def register(root: click.Group) -> None:
    """Attach the sub-commands (imported lazily so `--help` stays fast)."""
    # Feature modules add themselves below, one import + add_command each.
