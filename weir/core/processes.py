"""Questions about OS processes asked by the CLI and the embedded servers it launches.

Example:
    >>> import os
    >>> process_alive(os.getpid())
    True
"""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs. A zombie (ended, not yet reaped) counts as ended."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            # The command name is in parentheses and may hold spaces: split after it.
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
