"""``weir cluster start|status|stop``: a local cluster of daemon processes under one directory.

Layout of the directory: ``jobmaster.json`` / ``taskexecutor-N.json`` (addresses and pids,
written by the daemons once they listen), ``log/*.log``, and ``cluster.json`` (what
``start`` launched). Daemons run in their own session, so they outlive the shell.

Example:
    >>> from weir.cli.cluster import default_cluster_dir
    >>> default_cluster_dir().name
    'cluster'
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from weir.errors import UserError

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


def default_cluster_dir() -> Path:
    from weir import options
    from weir.config import Configuration

    configured = Configuration().get(options.CLUSTER_DIR)
    return Path(configured) if configured else Path.home() / ".weir" / "cluster"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still "exists": treat it as dead.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def jobmaster_address(directory: Path) -> str | None:
    """The address of the local cluster's JobMaster in ``directory``, if it runs."""
    info = _read_json(directory / "jobmaster.json")
    if info and pid_alive(int(info.get("pid", 0))):
        return str(info["address"])
    return None


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    out = open(log.with_suffix(".out"), "ab")  # noqa: SIM115 - handed to the child
    return subprocess.Popen([sys.executable, "-m", "weir", *args], stdout=out,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env={**os.environ,
                                                         "PYTHONUNBUFFERED": "1"})


def _wait_for(path: Path, proc: subprocess.Popen[bytes], what: str,
              deadline: float) -> dict[str, Any]:
    while time.monotonic() < deadline:
        info = _read_json(path)
        if info is not None and info.get("pid") == proc.pid:
            return info
        if proc.poll() is not None:
            log = path.parent / "log" / f"{path.stem}.out"
            tail = log.read_text()[-1500:] if log.exists() else ""
            msg = f"the {what} exited at start-up (code {proc.returncode}):\n{tail.strip()}"
            raise UserError(msg)
        time.sleep(0.05)
    msg = f"the {what} did not start within {START_TIMEOUT_S:.0f} s (see {path.parent}/log)"
    raise UserError(msg)


def start(directory: Path, task_executors: int, slots: int, dynamic: list[str],
          conf_file: str | None) -> dict[str, Any]:
    """Start a JobMaster and ``task_executors`` TaskExecutors; returns the status."""
    if jobmaster_address(directory):
        msg = (f"a cluster is already running in {directory}: stop it with "
               f"`weir cluster stop --dir {directory}` or use another --dir")
        raise UserError(msg)
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.json"):
        old.unlink()
    common = [f"-D{d}" for d in dynamic] + (["--conf", conf_file] if conf_file else [])
    deadline = time.monotonic() + START_TIMEOUT_S
    launched: list[subprocess.Popen[bytes]] = []
    try:
        jm = _spawn(["jobmaster", *common, "-Djobmaster.rpc.port=0",
                     "-Dmetrics.reporter.prom.port=0",
                     "--info-file", str(directory / "jobmaster.json"),
                     "--log-file", str(directory / "log" / "jobmaster.log")],
                    directory / "log" / "jobmaster.log")
        launched.append(jm)
        info = _wait_for(directory / "jobmaster.json", jm, "JobMaster", deadline)
        address = info["address"]
        tes = []
        for i in range(task_executors):
            name = f"taskexecutor-{i}"
            proc = _spawn(["taskexecutor", *common, "--jobmaster", address, "--slots",
                           str(slots), "-Dmetrics.reporter.prom.port=0",
                           f"-Dtaskmanager.resource-id={directory.name}-te-{i}",
                           "--info-file", str(directory / f"{name}.json"),
                           "--log-file", str(directory / "log" / f"{name}.log")],
                          directory / "log" / f"{name}.log")
            launched.append(proc)
            tes.append((name, proc))
        for name, proc in tes:
            _wait_for(directory / f"{name}.json", proc, f"TaskExecutor {name}", deadline)
        _wait_registered(address, task_executors, deadline, dynamic)
    except BaseException:
        for proc in launched:
            with contextlib.suppress(OSError):
                proc.kill()
        raise
    (directory / "cluster.json").write_text(json.dumps(
        {"pids": [p.pid for p in launched], "started": time.time()}))
    return status(directory, dynamic)


def _client(address: str, dynamic: list[str]) -> Any:
    from weir import options
    from weir.client import JobMasterClient
    from weir.config import Configuration

    conf = Configuration.load(None, dynamic)
    return JobMasterClient(address, conf.get(options.AUTH_TOKEN), timeout=5)


def _wait_registered(address: str, count: int, deadline: float, dynamic: list[str]) -> None:
    client = _client(address, dynamic)
    try:
        while time.monotonic() < deadline:
            with contextlib.suppress(UserError):
                if len(client.cluster_overview().task_executors) >= count:
                    return
            time.sleep(0.1)
    finally:
        client.close()
    msg = f"TaskExecutors did not register with the JobMaster at {address} in time"
    raise UserError(msg)


def status(directory: Path, dynamic: list[str] | None = None) -> dict[str, Any]:
    """The cluster in ``directory`` as a dict (the ``--json`` form of `cluster status`)."""
    info = _read_json(directory / "jobmaster.json")
    if info is None or not pid_alive(int(info.get("pid", 0))):
        msg = (f"no cluster is running in {directory}: start one with "
               f"`weir cluster start --dir {directory}`")
        raise UserError(msg)
    result: dict[str, Any] = {
        "dir": str(directory),
        "jobmaster": {"address": info["address"], "pid": info["pid"],
                      "metrics_url": info["metrics_url"]},
        "taskexecutors": []}
    registered: dict[str, Any] = {}
    client = _client(info["address"], dynamic or [])
    try:
        overview = client.cluster_overview()
        registered = {te.resource_id: te for te in overview.task_executors}
        result["slots_total"] = overview.slots_total
        result["slots_free"] = overview.slots_free
    except UserError as err:
        result["error"] = str(err)
    finally:
        client.close()
    for path in sorted(directory.glob("taskexecutor-*.json")):
        te = _read_json(path)
        if te is None:
            continue
        alive = pid_alive(int(te["pid"]))
        entry = {"resource_id": te["resource_id"], "pid": te["pid"], "address": te["address"],
                 "metrics_url": te["metrics_url"], "alive": alive,
                 "registered": te["resource_id"] in registered}
        if te["resource_id"] in registered:
            entry["slots_free"] = registered[te["resource_id"]].slots_free
            entry["slots_total"] = registered[te["resource_id"]].slots_total
        result["taskexecutors"].append(entry)
    return result


def stop(directory: Path) -> list[int]:
    """SIGTERM every daemon of the cluster (TaskExecutors first), SIGKILL what lingers."""
    pids: list[int] = []
    for path in [*sorted(directory.glob("taskexecutor-*.json")), directory / "jobmaster.json"]:
        info = _read_json(path)
        if info and pid_alive(int(info["pid"])):
            pids.append(int(info["pid"]))
    launched = _read_json(directory / "cluster.json") or {}
    pids += [p for p in launched.get("pids", []) if p not in pids and pid_alive(p)]
    if not pids:
        msg = f"no cluster is running in {directory}"
        raise UserError(msg)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for path in directory.glob("*.json"):
        path.unlink()
    return pids
