"""Process facts shared by the embedded store's supervisor and the runtime's worker templates."""

from __future__ import annotations

import os

__all__ = ["pid_exists"]


def pid_exists(pid: int) -> bool:
    """A process with this pid exists (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
