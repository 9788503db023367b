"""Restarts a local cluster's daemons when they die, as a Kubernetes deployment restarts a
pod: same command line, same resource id (same address, for the JobMaster), same log.

``weir cluster start --restart-taskexecutors`` writes each TaskExecutor's command to
``DIR/supervisor.json`` and runs ``weir cluster supervise --dir DIR`` in the background (in
the same environment, which carries the secrets); with high availability on
(``--ha``), the JobMaster's command is in the plan too, so a dead JobMaster comes back on
its fixed port and recovers the jobs. The supervisor polls the daemons' pids; a dead one is
started again after a back-off that doubles while it keeps dying within ``STABLE_S`` of its
start (1 s up to 30 s), so a daemon that cannot start does not spin. It ends when the
cluster directory no longer lists it (``weir cluster stop`` removes ``cluster.json``) or on
SIGTERM. What it did goes to ``DIR/log/supervisor.log`` and, per daemon, to the
``restarts`` counts in ``supervisor.json``.

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

from weir.core.cluster_directory import ClusterDirectory
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


#: The JobMaster's name in the plan (its info file is ``jobmaster.json``).
JOBMASTER = "jobmaster"


def write_plan(directory: Path, commands: list[dict[str, Any]],
               jobmaster: dict[str, Any] | None = None) -> None:
    """What to supervise: per TaskExecutor, ``name``, ``args`` (of ``weir``) and ``log``;
    ``jobmaster``: the JobMaster's ``args`` and ``log`` (high availability), if it is to be
    restarted too."""
    plan: dict[str, Any] = {"taskexecutors": [{**c, "restarts": 0} for c in commands]}
    if jobmaster is not None:
        plan["jobmaster"] = {**jobmaster, "name": JOBMASTER, "restarts": 0}
    (directory / SUPERVISOR_FILE).write_text(json.dumps(plan, indent=2))


def _entries(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [*([plan["jobmaster"]] if plan.get("jobmaster") else []), *plan["taskexecutors"]]


def restarts(directory: Path) -> dict[str, int]:
    """Daemon name (``jobmaster``, ``taskexecutor-N``) -> how often the supervisor
    restarted it."""
    try:
        plan = json.loads((directory / SUPERVISOR_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {entry["name"]: entry["restarts"] for entry in _entries(plan)}


def _label(name: str) -> str:
    return "the JobMaster" if name == JOBMASTER else f"TaskExecutor {name}"


def supervise(directory: Path) -> int:
    """Keep the cluster's supervised daemons running until the cluster is stopped."""
    from weir.cli.cluster import spawn

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    # The TaskExecutors it starts are its children: let the kernel reap them when they
    # die, or they would linger as zombies that still look alive.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    plan = json.loads((directory / SUPERVISOR_FILE).read_text())
    entries = _entries(plan)
    files = ClusterDirectory(directory)
    policies = {e["name"]: RestartPolicy() for e in entries}
    started = {e["name"]: time.monotonic() for e in entries}
    # The pids of the daemons it started itself. A restarted daemon writes its info file
    # only once it serves, seconds later; until then the child's pid is what says it lives
    # (reading the missing file as a death queued a second, needless restart).
    children: dict[str, int] = {}
    due: dict[str, float] = {}
    log.info("supervising %s in %s", ", ".join(_label(e["name"]) for e in entries), directory)
    while not stopping.wait(POLL_S):
        if not files.cluster_file.exists() and not files.info_file(JOBMASTER).exists():
            break
        for entry in entries:
            name = entry["name"]
            pid = children.get(name)
            if pid is None:
                pid = files.daemon_pid(name)
            if pid is not None and process_alive(pid):
                continue
            now = time.monotonic()
            if name not in due:
                due[name] = now + policies[name].on_death(now, started[name])
                log.warning("%s died; starting it again in %.0f s", _label(name),
                            due[name] - now)
                continue
            if now < due[name]:
                continue
            del due[name]
            files.info_file(name).unlink(missing_ok=True)
            children[name] = spawn(entry["args"], Path(entry["log"])).pid
            started[name] = now
            entry["restarts"] += 1
            (directory / SUPERVISOR_FILE).write_text(json.dumps(plan, indent=2))
            log.info("started %s again (restart %d)", _label(name), entry["restarts"])
    log.info("supervisor stops")
    return 0


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
