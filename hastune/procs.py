"""Processes on this host: whether one is still alive."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (one we may not signal counts as running); a zombie — dead,
    not yet reaped by its parent — is dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True
