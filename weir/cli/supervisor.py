"""Restarts a local cluster's TaskExecutors when they die, as a Kubernetes deployment
restarts a pod: same command line, same resource id, same log.

``weir cluster start --restart-taskexecutors`` writes each TaskExecutor's command to
``DIR/supervisor.json`` and runs ``weir cluster supervise --dir DIR`` in the background (in
the same environment, which carries the secrets). The supervisor polls the TaskExecutors'
pids; a dead one is started again after a back-off that doubles while it keeps dying
within ``STABLE_S`` of its start (1 s up to 30 s), so a TaskExecutor that cannot start does
not spin. It ends when the cluster directory no longer lists it (``weir cluster stop``
removes ``cluster.json``) or on SIGTERM. What it did goes to ``DIR/log/supervisor.log``
and, per TaskExecutor, to the ``restarts`` counts in ``supervisor.json``.

The restart policy is a pure function of the clock (:class:`RestartPolicy`), so it is
unit-tested without processes.

Example:
    >>> policy = RestartPolicy()
    >>> policy.on_death(now=10.0, started=0.0), policy.on_death(now=12.0, started=11.0)
    (1.0, 2.0)
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weir.core.processes import process_alive

log = logging.getLogger(__name__)

SUPERVISOR_FILE = "supervisor.json"
POLL_S = 0.2
#: A TaskExecutor that lived this long before dying starts over from the shortest delay.
STABLE_S = 30.0
INITIAL_DELAY_S = 1.0
MAX_DELAY_S = 30.0


@dataclass
class RestartPolicy:
    """How long to wait before restarting a TaskExecutor that died."""

    delay: float = 0.0

    def on_death(self, now: float, started: float) -> float:
        """The delay before the next start, given when the dead process had started."""
        if now - started >= STABLE_S or self.delay == 0.0:
            self.delay = INITIAL_DELAY_S
        else:
            self.delay = min(self.delay * 2, MAX_DELAY_S)
        return self.delay


def write_plan(directory: Path, commands: list[dict[str, Any]]) -> None:
    """What to supervise: per TaskExecutor, ``name``, ``args`` (of ``weir``) and ``log``."""
    plan = {"taskexecutors": [{**c, "restarts": 0} for c in commands]}
    (directory / SUPERVISOR_FILE).write_text(json.dumps(plan, indent=2))


def restarts(directory: Path) -> dict[str, int]:
    """TaskExecutor name -> how often the supervisor restarted it."""
    try:
        plan = json.loads((directory / SUPERVISOR_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {te["name"]: te["restarts"] for te in plan["taskexecutors"]}


def supervise(directory: Path) -> int:
    """Keep the cluster's TaskExecutors running until the cluster is stopped."""
    from weir.cli.cluster import spawn

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    # The TaskExecutors it starts are its children: let the kernel reap them when they
    # die, or they would linger as zombies that still look alive.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    plan = json.loads((directory / SUPERVISOR_FILE).read_text())
    entries: list[dict[str, Any]] = plan["taskexecutors"]
    policies = {e["name"]: RestartPolicy() for e in entries}
    started = {e["name"]: time.monotonic() for e in entries}
    due: dict[str, float] = {}
    log.info("supervising %d TaskExecutors in %s", len(entries), directory)
    while not stopping.wait(POLL_S):
        if not (directory / "cluster.json").exists() and not (directory / "jobmaster.json"
                                                                 ).exists():
            break
        for entry in entries:
            name = entry["name"]
            info = _read(directory / f"{name}.json")
            if info is not None and process_alive(int(info["pid"])):
                continue
            now = time.monotonic()
            if name not in due:
                due[name] = now + policies[name].on_death(now, started[name])
                log.warning("TaskExecutor %s died; starting it again in %.0f s", name,
                            due[name] - now)
                continue
            if now < due[name]:
                continue
            del due[name]
            (directory / f"{name}.json").unlink(missing_ok=True)
            spawn(entry["args"], Path(entry["log"]))
            started[name] = now
            entry["restarts"] += 1
            (directory / SUPERVISOR_FILE).write_text(json.dumps(plan, indent=2))
            log.info("started TaskExecutor %s again (restart %d)", name, entry["restarts"])
    log.info("supervisor stops")
    return 0


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def stop_supervisor(pid: int, timeout: float) -> None:
    """SIGTERM the supervisor and wait for it, so it restarts nothing while daemons stop."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if process_alive(pid):
        os.kill(pid, signal.SIGKILL)
