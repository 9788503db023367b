"""Hosts that share nothing but the network: a JobMaster, TaskExecutors and a client, each on
a "machine" of its own, for the cluster tests (tests/cluster).

A :class:`Host` has a name, a loopback address of its own (127.0.0.2, 127.0.0.3, ...: all of
127/8 answers on Linux) and a *disk*: a directory of the test's tmp_path that every process
of the host sees as its ``/tmp``, with HOME (``/tmp/home``) and the working directory
(``/tmp/work``) on it (see :mod:`tests.support.host_exec`, run in a mount namespace of its
own through ``unshare``). Whatever a host writes under /tmp, HOME or its working directory
no other host sees; restarted on the same disk it finds its files again, a new host starts
empty. The checkout and its .venv are shared, as the same image on every machine would be;
S3 (the session's SeaweedFS) is reached over the network like any other service.

Daemons bind and advertise the host's address (``jobmaster.rpc.bind-host``,
``taskmanager.host``, ``metrics.reporter.prom.host``) and publish their addresses in info
files on the host's disk, which the harness reads from outside (as an operator would read a
machine's files). Secrets (the S3 keys) reach processes only through their environment;
other settings go on the command line as ``-D``. Every process runs in a session of its
own, so :meth:`Host.kill` SIGKILLs each process group the host started: the whole machine
gone at once. The :func:`hosts` fixture stops every process at teardown, also when the test
failed, and skips (naming why) where mount namespaces cannot be had: not root, no
``unshare``, or the kernel refusing.

Example:
    >>> disk_path(Path("/d"), "/tmp/work/job.py")
    PosixPath('/d/work/job.py')
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from tests.support.host_exec import TMP
from weir.core.cluster_directory import JobMasterInfo, TaskExecutorInfo
from weir.testing.cluster import REPO, poll

__all__ = ["Daemon", "Host", "Hosts", "disk_path", "free_port", "host_isolation_refusal",
           "hosts"]

#: How long a daemon gets to publish its info file (and a TaskExecutor to register).
START_TIMEOUT_S = 60.0
#: How long a SIGTERMed process gets before SIGKILL at teardown.
STOP_TIMEOUT_S = 15.0
LAUNCHER = "tests.support.host_exec"
#: Where a host's daemons keep their info files and logs, as the host sees it.
STATE_DIR = TMP / "weir"
#: The first host's address; the next ones count up from it.
FIRST_ADDRESS = (127, 0, 0, 2)


def disk_path(disk: Path, inside: str | Path) -> Path:
    """Where the file a host sees at ``inside`` (under /tmp) lies on the test machine."""
    relative = Path(inside).relative_to(TMP)
    return disk / relative


def _environment(extra: Mapping[str, str]) -> dict[str, str]:
    """A host process's environment: the test runner's, less its weir and AWS settings (a
    host knows only what it is given), plus ``extra``."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("WEIR_", "AWS_")) and k not in ("PYTHONPATH", "PWD")}
    # The checkout is the shared image: the launcher and weir are imported from it.
    return {**base, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", **extra}


def _launcher(disk: Path, command: list[str]) -> list[str]:
    return ["unshare", "--mount", "--propagation", "private", "--", sys.executable, "-P",
            "-m", LAUNCHER, str(disk), "--", *command]


def weir_command(*args: str) -> list[str]:
    """``python -m weir ARGS`` with the shared interpreter (``-P``: the working directory,
    on the host's disk, is not on sys.path)."""
    return [sys.executable, "-P", "-m", "weir", *args]


_refusal: list[str] = []


def host_isolation_refusal() -> str:
    """Why hosts cannot have disks of their own here (empty if they can); tried once."""
    if not _refusal:
        if not sys.platform.startswith("linux"):
            reason = "mount namespaces are Linux only"
        elif os.geteuid() != 0:
            reason = "giving each host its own /tmp needs root (unshare --mount)"
        elif shutil.which("unshare") is None:
            reason = "the unshare command (util-linux) is not installed"
        else:
            tried = subprocess.run(
                ["unshare", "--mount", "--propagation", "private", "--", sys.executable, "-P",
                 "-m", LAUNCHER, "check"], capture_output=True, text=True, timeout=60,
                env=_environment({}), check=False)
            lines = tried.stderr.strip().splitlines()
            reason = "" if tried.returncode == 0 else (
                f"unshare --mount refused: {lines[-1] if lines else tried.returncode}")
        _refusal.append(reason)
    return _refusal[0]


@dataclass
class Daemon:
    """One daemon a host runs: its ``weir`` arguments (kept, so a restart repeats them) and
    its current process."""

    kind: str                          # "jobmaster" or "taskexecutor"
    name: str                          # names its info and log files
    args: list[str]
    jobmaster: str = ""                # a TaskExecutor's JobMaster
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def info_file(self) -> Path:
        return STATE_DIR / f"{self.name}.json"

    @property
    def log_file(self) -> Path:
        return STATE_DIR / "log" / f"{self.name}.log"


class Host:
    """A machine of the test cluster (see the module's docstring). Not thread-safe."""

    def __init__(self, name: str, address: str, disk: Path,
                 env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.address = address
        self.disk = disk
        self.env = dict(env or {})
        self.daemons: list[Daemon] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        disk.mkdir(mode=0o700, parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.address})"

    def path(self, inside: str | Path) -> Path:
        """The test machine's path of the file this host sees at ``inside`` (under /tmp)."""
        return disk_path(self.disk, inside)

    def write(self, inside: str | Path, text: str) -> Path:
        """Put a file on this host's disk (only this host sees it); returns ``inside``."""
        target = self.path(inside)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        return Path(inside)

    # -- processes --------------------------------------------------------------------------

    def _spawn(self, command: list[str], output: Path, env: Mapping[str, str]
               ) -> subprocess.Popen[bytes]:
        outside = self.path(output)
        outside.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with outside.open("ab") as out:
            proc = subprocess.Popen(_launcher(self.disk, command), stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True,
                                    env=_environment({**self.env, **env}))
        self._procs.append(proc)
        return proc

    def _start(self, daemon: Daemon) -> None:
        info = self.path(daemon.info_file)
        info.unlink(missing_ok=True)  # a killed daemon's file names its dead pid
        proc = daemon.proc = self._spawn(
            weir_command(*daemon.args, "--info-file", str(daemon.info_file),
                         "--log-file", str(daemon.log_file)),
            STATE_DIR / "log" / f"{daemon.name}.out", {})

        def published() -> bool:
            if proc.poll() is not None:
                out = self.path(STATE_DIR / "log" / f"{daemon.name}.out")
                msg = (f"{daemon.kind} on {self} exited at start-up (code {proc.returncode}):"
                       f"\n{out.read_text()[-2000:] if out.exists() else ''}")
                raise RuntimeError(msg)
            data = JobMasterInfo.read(info) if daemon.kind == "jobmaster" else \
                TaskExecutorInfo.read(info)
            return data is not None and data.pid == proc.pid

        poll(published, START_TIMEOUT_S, interval=0.05,
             what=f"the {daemon.kind} on {self} to publish {daemon.info_file}")
        if daemon.kind == "taskexecutor":
            self._wait_registered(daemon, proc.pid)

    def _wait_registered(self, daemon: Daemon, pid: int) -> None:
        from weir.client.cluster_client import JobMasterClient

        def registered() -> bool:
            client = JobMasterClient(daemon.jobmaster, timeout=5)
            try:
                overview = client.cluster_overview(timeout=5)
            except grpc.RpcError:  # a JobMaster still starting: ask again
                return False
            finally:
                client.close()
            return any(te.pid == pid for te in overview.task_executors)

        poll(registered, START_TIMEOUT_S, interval=0.1,
             what=f"the TaskExecutor on {self} (pid {pid}) to register")

    def start_jobmaster(self, *options: str, port: int | None = None) -> str:
        """``weir jobmaster`` on this host (``options``: KEY=VALUE, as ``-D``), bound to
        its address; ``port`` fixes the RPC port (high availability needs the address to
        stay across restarts), else a free one is taken. Returns the address once it
        listens."""
        daemon = Daemon("jobmaster", "jobmaster", [
            "jobmaster", f"-Djobmaster.rpc.bind-host={self.address}",
            f"-Djobmaster.rpc.port={port or 0}", "-Drest.port=0", *self._metrics_options(),
            *(f"-D{o}" for o in options)])
        self.daemons.append(daemon)
        self._start(daemon)
        return self.jobmaster_address()

    def start_taskexecutor(self, jobmaster: str, *options: str, slots: int = 1,
                           resource_id: str | None = None) -> str:
        """``weir taskexecutor --jobmaster JOBMASTER`` on this host with ``slots`` slots;
        returns its resource id once it registered. ``resource_id`` fixes the resource id
        and puts the working directory at a fixed place on the disk (``/tmp/tm-<id>``), so
        a restart of the host finds the state it kept (task-local recovery)."""
        index = sum(d.kind == "taskexecutor" for d in self.daemons)
        fixed = ([f"-Dtaskmanager.resource-id={resource_id}",
                  f"-Dprocess.taskmanager.working-dir={TMP / f'tm-{resource_id}'}"]
                 if resource_id else [])
        daemon = Daemon("taskexecutor", f"taskexecutor-{index}", [
            "taskexecutor", "--jobmaster", jobmaster, "--slots", str(slots),
            f"-Dtaskmanager.host={self.address}", *self._metrics_options(), *fixed,
            *(f"-D{o}" for o in options)], jobmaster=jobmaster)
        self.daemons.append(daemon)
        self._start(daemon)
        info = TaskExecutorInfo.read(self.path(daemon.info_file))
        assert info is not None
        return info.resource_id

    def _metrics_options(self) -> list[str]:
        return [f"-Dmetrics.reporter.prom.host={self.address}", "-Dmetrics.reporter.prom.port=0"]

    def jobmaster_address(self) -> str:
        """The address this host's JobMaster published (raises if it has none)."""
        info = JobMasterInfo.read(self.path(STATE_DIR / "jobmaster.json"))
        if info is None:
            msg = f"{self} runs no JobMaster"
            raise RuntimeError(msg)
        return info.address

    def taskexecutors(self) -> list[TaskExecutorInfo]:
        """The info files of this host's TaskExecutors (alive or not)."""
        found = [TaskExecutorInfo.read(self.path(d.info_file)) for d in self.daemons
                 if d.kind == "taskexecutor"]
        return [info for info in found if info is not None]

    def weir(self, *args: str, timeout: float = 120, env: Mapping[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
        """Run a client command (``weir ARGS``, e.g. ``run job.py --jobmaster ...``) on this
        host, in its working directory; returns what it did without checking it."""
        return self.run(weir_command(*args), timeout, env)

    def python(self, code: str, timeout: float = 60, env: Mapping[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
        """Run ``python -c CODE`` on this host (what it sees, for checks of the harness)."""
        return self.run([sys.executable, "-P", "-c", code], timeout, env)

    def run(self, command: list[str], timeout: float = 120,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``command`` on this host and wait for it (SIGKILLed after ``timeout``
        seconds, raising TimeoutExpired); returns what it did without checking it."""
        command = _launcher(self.disk, command)
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True, start_new_session=True,
                                env=_environment({**self.env, **(env or {})}))
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        return subprocess.CompletedProcess(command, proc.returncode, out, err)

    # -- failures ---------------------------------------------------------------------------

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self._procs if p.poll() is None]

    def kill(self) -> float:
        """SIGKILL every process of this host (each one's process group) and reap them;
        returns the monotonic time of the kill. Its disk stays as it was."""
        killed = time.monotonic()
        for proc in self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in self._procs:
            proc.wait(timeout=STOP_TIMEOUT_S)
        self._procs = []
        return killed

    def restart(self) -> None:
        """Start this host's daemons again, with the arguments they had, on the same disk
        and address (after :meth:`kill`; a live host is killed first)."""
        if self.alive():
            self.kill()
        for daemon in self.daemons:
            self._start(daemon)

    def stop(self) -> None:
        """SIGTERM every process of this host, SIGKILL what is left after
        ``STOP_TIMEOUT_S``. Idempotent."""
        procs = self.alive()
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_TIMEOUT_S)
        self._procs = []

    def logs(self) -> str:
        """The tail of every daemon output file on this host's disk (for failure
        messages)."""
        parts = []
        for out in sorted(self.path(STATE_DIR / "log").glob("*.out")):
            parts.append(f"--- {self.name}: {out.name}\n{out.read_text()[-3000:]}")
        return "\n".join(parts)


class Hosts:
    """Creates the hosts of one test, each with the next loopback address and a disk under
    ``root``; :meth:`stop` stops all of them."""

    def __init__(self, root: Path, env: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.env = dict(env or {})
        self.all: list[Host] = []

    def new(self, name: str, env: Mapping[str, str] | None = None) -> Host:
        """A new host named ``name`` with an empty disk; ``env`` adds to the environment
        every host of this test gets (e.g. the S3 keys)."""
        a, b, c, d = FIRST_ADDRESS
        address = f"{a}.{b}.{c}.{d + len(self.all)}"
        host = Host(name, address, self.root / name, {**self.env, **(env or {})})
        self.all.append(host)
        return host

    def logs(self) -> str:
        return "\n".join(host.logs() for host in self.all)

    def stop(self) -> None:
        for host in reversed(self.all):  # clients and TaskExecutors before the JobMaster
            host.stop()


def free_port(address: str) -> int:
    """A port free on ``address`` now (for a JobMaster that must keep its address)."""
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    """The hosts of one test (``hosts.new(name)``), every process stopped at teardown;
    skips where a host cannot get a disk of its own."""
    reason = host_isolation_refusal()
    if reason:
        pytest.skip(f"hosts with disks of their own are not available: {reason}")
    made = Hosts(tmp_path / "hosts")
    try:
        yield made
    finally:
        made.stop()

